"""``phaseprof analyze --reader native|python|auto`` and ``--verbose``: one option chooses the trace reader, the
run says which one read each trace and why (stderr), and the breakdown JSON records it (``tool.reader``).
Where a choice cannot be honoured the run stops with one line (never a silent other reader)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from phaseprof.commands import main as cli
from phaseprof.trace import native

from ..conftest import REPO
from ..native_build import scanner_or_skip

TRACE = "traces/cpu/tiny-hybrid-prefill128-decode8/trace.json.gz"
RANKS = "traces/h200x2/server-tp2-ep/decode-step1"


@pytest.fixture(autouse=True)
def _in_repo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("PHASEPROF_SPLIT_READ", "0")


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main(["analyze", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(("reader", "said"), [
    ("auto", "read by the native scanner ("), ("native", "read by the native scanner ("),
    ("python", "read by the pure-Python reader: --reader python")])
def test_verbose_says_which_reader_and_the_json_records_it(capsys: pytest.CaptureFixture[str], reader: str,
                                                           said: str) -> None:
    scanner_or_skip()
    code, out, err = _run(capsys, TRACE, "-f", "json", "--reader", reader, "--verbose")
    assert code == 0, err
    assert err.splitlines() == [f"{TRACE}: {said}" + (f"{native.status().path}, ABI {native.ABI_VERSION})"
                                                      if "native" in said else "")]
    assert orjson.loads(out)["tool"]["reader"] == ("python" if reader == "python" else "native")


def test_without_verbose_nothing_is_said(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, TRACE, "-f", "json")
    assert code == 0 and err == ""


def test_native_with_steps_is_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, _out, err = _run(capsys, TRACE, "--reader", "native", "--steps", "1:3")
    assert code == 2 and err.strip() == ("error: --reader native reads whole traces: --steps reads only its steps' "
                                         "events, with the pure-Python reader (--reader python or auto)")
    code, out, err = _run(capsys, TRACE, "--steps", "1:3", "-f", "json", "-v")
    assert code == 0 and "read by the pure-Python reader: --steps reads only the events" in err
    assert orjson.loads(out)["tool"]["reader"] == "python"


def test_native_without_the_scanner_is_an_environment_error(capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(native, "FOLDER", tmp_path)  # no library there
    monkeypatch.setattr(native, "_status", None)
    monkeypatch.setattr(native, "_lib", None)
    code, _out, err = _run(capsys, TRACE, "--reader", "native")
    assert code == 3 and err.startswith("error: --reader native: the native scanner is not installed")
    code, out, err = _run(capsys, TRACE, "-f", "json", "--verbose")  # auto: pure Python, and why
    assert code == 0 and "read by the pure-Python reader: the native scanner is not installed" in err
    assert orjson.loads(out)["tool"]["reader"] == "python"


def test_a_refused_library_is_said_even_without_verbose(capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    stale = tmp_path / "_phaseprof_scan.abi3.so"
    stale.write_bytes(b"")

    class OtherAbi:
        def __init__(self, path: str) -> None:
            self.pp_abi_version = lambda: native.ABI_VERSION + 1

    monkeypatch.setattr(native, "FOLDER", tmp_path)
    monkeypatch.setattr(native.ctypes, "CDLL", OtherAbi)
    monkeypatch.setattr(native, "_status", None)
    monkeypatch.setattr(native, "_lib", None)
    code, out, err = _run(capsys, TRACE, "-f", "json")
    assert code == 0 and orjson.loads(out)["tool"]["reader"] == "python"
    assert err.strip() == (f"warning: the native scanner {stale} has ABI {native.ABI_VERSION + 1}, this phaseprof "
                           f"needs ABI {native.ABI_VERSION}: reinstall phaseprof; traces are read by the slower "
                           "pure-Python reader")


def test_rank_directory_takes_the_reader(capsys: pytest.CaptureFixture[str]) -> None:
    code, _out, err = _run(capsys, RANKS, "-f", "json", "-j", "1", "--reader", "python", "-v")
    assert code == 0
    lines = err.splitlines()
    assert len(lines) == 2 and all(line.endswith(": read by the pure-Python reader") for line in lines), err


def test_reader_with_ray_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code, _out, err = _run(capsys, "--ray", "local", "--reader", "python", "x*.json.gz")
    assert code == 2 and err.startswith("error: --reader python with --ray")
