"""Bad input to ``phaseprof analyze``: exit code 2 and ONE line on stderr naming the file and the problem."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from phaseprof.commands.main import main

_KERNEL = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 5,
           "args": {"correlation": 1, "stream": 7, "device": 0}}


def _write(name: str, data: bytes) -> Callable[[Path], Path]:
    def make(d: Path) -> Path:
        p = d / name
        p.write_bytes(data)
        return p
    return make


def _truncated_gzip(d: Path) -> Path:
    whole = gzip.compress(json.dumps({"traceEvents": [_KERNEL] * 500}).encode())
    p = d / "cut_short.json.gz"
    p.write_bytes(whole[: len(whole) // 2])
    return p


def _directory(d: Path) -> Path:
    p = d / "a_directory"
    p.mkdir()
    return p


CASES = {
    # case id: (make the bad path in tmp_path, words the one line must contain)
    "not_json": (_write("notes.json", b"hello, this is not a trace\n"), ("not",)),
    "binary_garbage": (_write("noise.json", bytes(range(256)) * 8), ("not",)),
    "truncated_gzip": (_truncated_gzip, ("gzip",)),
    "gzip_garbage": (_write("bad_header.json.gz", b"\x1f\x8b" + b"garbage" * 10), ("gzip",)),
    "empty_file": (_write("empty.json", b""), ("empty",)),
    "empty_gzip": (_write("empty.json.gz", gzip.compress(b"")), ("empty",)),
    "truncated_json": (_write("half.json", b'{"traceEvents": [{"ph": "X", "cat": "ker'), ("truncated",)),
    "no_trace_events": (_write("other.json", b'{"schemaVersion": 1, "deviceProperties": []}'), ("traceEvents",)),
    "no_usable_events": (_write("nothing.json", b'{"traceEvents": []}'), ("nothing",)),
    "negative_duration": (_write("negative.json", json.dumps({"traceEvents": [{**_KERNEL, "dur": -5}]}).encode()),
                          ("negative",)),
    "directory": (_directory, ("director",)),
    "missing_file": (lambda d: d / "does_not_exist.json.gz", ("no such file",)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_one_clear_line(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make, words = CASES[case]
    path = make(tmp_path)
    rc = main(["analyze", str(path)])
    out, err = capsys.readouterr()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2, f"exit code {rc}, stderr: {err!r}"
    assert len(lines) == 1, f"expected one line on stderr, got: {err!r}"
    line = lines[0]
    assert path.name in line, f"the line does not name the file: {line!r}"
    assert all(w.lower() in line.lower() for w in words), f"{line!r} should mention {words}"
    assert "Traceback" not in err + out
