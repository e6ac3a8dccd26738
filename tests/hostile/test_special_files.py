"""A FIFO, ``/dev/zero`` or a directory where a file is expected is one line (exit 2) at once:
never a read that waits for a writer for ever, never one that fills memory. Files are opened without blocking
and checked on the open descriptor (``phaseprof.io.read_regular``), before a byte is read.

A watchdog writes into the FIFO after ``WATCHDOG_S``: a command that blocked on it then fails this test on time
instead of hanging the suite."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from phaseprof.errors import PhaseprofError
from phaseprof.io import read_regular
from tests.hostile.helpers import one_line_error

from ..conftest import REPO

TRACE = REPO / "traces/cpu/tiny-hybrid-prefill128-decode8/trace.json.gz"
RUN = REPO / "traces/h200/hooks/eager-prefill-4096"
SWEEP = REPO / "traces/h200/serving/bf16/decode"
WATCHDOG_S = 15.0

#: Each option that takes a file: the command line with ``{F}`` where the file goes.
COMMANDS = {
    "analyze --ceilings": ["analyze", str(TRACE), "--ceilings", "{F}"],
    "analyze run --ceilings": ["analyze", str(RUN), "--ceilings", "{F}"],
    "ceilings --measured": ["ceilings", "--show", "--measured", "{F}"],
    "pareto --ceilings": ["pareto", str(SWEEP), "--ceilings", "{F}"],
    "analyze --model-config": ["analyze", str(RUN), "--model-config", "{F}"],
    "analyze --rules": ["analyze", str(TRACE), "--rules", "{F}"],
    "analyze trace": ["analyze", "{F}"],
    "sweep --show": ["sweep", "--show", "{F}"],
    "sweep --server-log": ["sweep", "--server", "http://127.0.0.1:9", "--server-log", "{F}", "--phase", "decode"],
}


@pytest.fixture
def fifo(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "fifo.json"
    os.mkfifo(path)
    done = threading.Event()

    def watchdog() -> None:  # unblocks a reader stuck on the FIFO, so the test fails instead of hanging
        if not done.wait(WATCHDOG_S):
            try:
                fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                return
            os.write(fd, b"{}")
            os.close(fd)

    t = threading.Thread(target=watchdog, daemon=True)
    t.start()
    yield path
    done.set()


@pytest.mark.parametrize("name", list(COMMANDS))
@pytest.mark.parametrize("special", ["fifo", "/dev/zero", "directory"])
def test_special_file_is_one_line_at_once(name: str, special: str, fifo: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    path = {"fifo": str(fifo), "/dev/zero": "/dev/zero", "directory": str(tmp_path)}[special]
    argv = [a.replace("{F}", path) for a in COMMANDS[name]]
    t0 = time.monotonic()
    line = one_line_error(argv, capsys, path)
    assert time.monotonic() - t0 < WATCHDOG_S / 2
    assert any(w in line for w in ("not a regular file", "is a directory", "not a sweep", "directory has no",
                                   "not a run directory", "no such file")), line


def test_read_regular_bounds_size_and_kind(tmp_path: Path, fifo: Path) -> None:
    small = tmp_path / "a.json"
    small.write_bytes(b"x" * 10)
    assert read_regular(small, what="a record", max_bytes=10) == b"x" * 10
    with pytest.raises(PhaseprofError, match="over 9 bytes: not a record"):
        read_regular(small, what="a record", max_bytes=9)
    assert read_regular(small, what="a log", max_bytes=4, head=True) == b"xxxx"
    for special, says in ((fifo, "not a regular file"), (Path("/dev/zero"), "not a regular file"),
                          (tmp_path, "is a directory"), (tmp_path / "none", "no such file")):
        with pytest.raises(PhaseprofError, match=says):
            read_regular(special, what="a record", max_bytes=1 << 20)
