"""Hostile trace input: every case ends with exit 2 and ONE line naming the file, or a correct result.

Each reproducer is made here, small: special files, gzip members and padding, whitespace bombs (16 MB runs of
blanks compress to ~16 KB), integers beyond int64, odd digit strings, absurd timestamps, deep nesting.
"""

from __future__ import annotations

import gzip
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from phaseprof.commands.main import main
from phaseprof.trace import limits
from phaseprof.trace.read import load_tables

_KERNEL = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 5,
           "args": {"correlation": 1, "stream": 7, "device": 0}}
_LAUNCH = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 0, "tid": 1, "ts": 8, "dur": 1,
           "args": {"correlation": 1}}
_OP = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 0, "tid": 1, "ts": 7, "dur": 3,
       "args": {"External id": 3}}
_MEM = {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 0, "tid": 1, "ts": 9,
        "args": {"Bytes": 512, "Total Allocated": 512, "Device Type": 1, "Device Id": 0}}
BIG = 2**70


def _doc(*events: dict, **top: object) -> bytes:
    return json.dumps({"traceEvents": [_OP, _LAUNCH, _KERNEL, _MEM, *events], **top}).encode()


def _with(event: dict, *path_value: tuple[tuple[str, ...], object]) -> dict:
    e = json.loads(json.dumps(event))
    for path, value in path_value:
        d = e
        for k in path[:-1]:
            d = d[k]
        d[path[-1]] = value
    return e


def _file(name: str, data: bytes) -> Callable[[Path], Path]:
    def make(d: Path) -> Path:
        (d / name).write_bytes(data)
        return d / name
    return make


def _fifo(d: Path) -> Path:
    os.mkfifo(d / "pipe.json")  # opening it for reading would block until a writer came: never here
    return d / "pipe.json"


def _dev_zero(d: Path) -> Path:
    (d / "zeros.json").symlink_to("/dev/zero")
    return d / "zeros.json"


def _deep(key: str) -> bytes:
    nest = "[" * 10_000 + "]" * 10_000
    return (b'{"traceEvents": [' + json.dumps(_KERNEL)[:-1].encode() + f', "{key}": {nest}}}'.encode()
            + b'], "deep": ' + nest.encode() + b"}")


BAD = {
    # case: (make the path, words the one line must contain)
    "fifo": (_fifo, ("not a regular file",)),
    "dev_zero_symlink": (_dev_zero, ("not a regular file",)),
    "correlation_beyond_int64": (_file("corr.json", _doc(_with(_KERNEL, (("args", "correlation"), BIG)))),
                                 ("args.correlation", "64-bit")),
    "uint64_correlation": (_file("u64.json", _doc(_with(_KERNEL, (("args", "correlation"), 2**64 - 1)))),
                           ("args.correlation", "64-bit")),
    "external_id_beyond_int64": (_file("ext.json", _doc(_with(_OP, (("args", "External id"), -BIG)))),
                                 ("External id", "64-bit")),
    "bytes_float_1e300": (_file("bytes.json", _doc(_with(_KERNEL, (("args", "bytes"), 1e300)))),
                          ("args.bytes", "64-bit")),
    "bytes_5000_digit_string": (_file("digits.json", _doc(_with(_KERNEL, (("args", "bytes"), "7" * 5000)))),
                                ("args.bytes", "5000 digits")),
    "memory_bytes_beyond_int64": (_file("mem.json", _doc(_with(_MEM, (("args", "Bytes"), BIG)))),
                                  ("[memory]", "64-bit")),
    "dur_2_pow_62": (_file("dur.json", _doc(*[_with(_KERNEL, (("dur",), 2**62))] * 5)), ("duration",)),
    "ts_1e308": (_file("ts.json", _doc(_with(_KERNEL, (("ts",), 1e308)))), ("timestamp",)),
    "ts_string_1e25": (_file("tsstr.json", _doc(_with(_KERNEL, (("ts",), "1e25")))), ("timestamp",)),
    "ts_negative_huge": (_file("tsneg.json", _doc(_with(_OP, (("ts",), -1e25)))), ("timestamp",)),
    "whitespace_bomb_in_events": (_file("ws.json.gz", gzip.compress(b'{"traceEvents": [' + b" " * (20 << 20)
                                                                     + b"]}")), ("whitespace",)),
    "whitespace_bomb_before": (_file("ws0.json.gz", gzip.compress(b"\n" * (20 << 20) + _doc())), ("whitespace",)),
    "nesting_10000_deep": (_file("deep.json", _deep("nested")), ("nested too deeply",)),
    "gzip_member_then_garbage": (_file("junk.json.gz", gzip.compress(_doc()) + b"junk after the member"),
                                 ("gzip",)),
}


def _one_line(path: Path, capsys: pytest.CaptureFixture[str], *words: str, argv: tuple[str, ...] = ()) -> None:
    rc = main(["analyze", str(path), *argv])
    out, err = capsys.readouterr()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2, f"exit code {rc}, stderr: {err!r}"
    assert len(lines) == 1, f"expected one line on stderr, got: {err!r}"
    assert path.name in lines[0], f"the line does not name the file: {lines[0]!r}"
    assert all(w.lower() in lines[0].lower() for w in words), f"{lines[0]!r} should mention {words}"
    assert "Traceback" not in err + out


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_is_one_clear_line(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make, words = BAD[case]
    _one_line(make(tmp_path), capsys, *words)


GOOD = {
    # case: (bytes of a valid trace, what must hold) - odd but readable input gives the plain trace's tables
    "gzip_zero_padding": gzip.compress(_doc()) + bytes(10_000),
    "three_gzip_members": gzip.compress(_doc()[:20]) + gzip.compress(_doc()[20:90]) + gzip.compress(_doc()[90:]),
    "plain_zero_padding": _doc() + bytes(100),
    # Strings int() rejects or misreads are not numbers: treated like legacy "stream 7" (the default).
    "odd_digit_strings": _doc(_with(_KERNEL, (("args", "stream"), "²"), (("args", "device"), "--5"),
                                    (("args", "correlation"), "١٢"))),
}


@pytest.mark.parametrize("case", list(GOOD))
def test_odd_but_valid_input_reads(case: str, tmp_path: Path) -> None:
    p = tmp_path / "t.json.gz"
    p.write_bytes(GOOD[case])
    t = load_tables(p)
    assert len(t.ops) == 1 and len(t.runtime) == 1 and len(t.memory) == 1
    assert set(t.gpu["dur_ns"]) == {5000}
    if case == "odd_digit_strings":
        assert t.gpu[["stream", "device", "correlation"]].values.tolist() == [[7, 0, 1], [-1, -1, -1]]
    else:
        assert len(t.gpu) == 1
    assert t.meta.decompressed_bytes == len(gzip.decompress(GOOD[case]) if GOOD[case][:2] == b"\x1f\x8b"
                                            else GOOD[case])


def test_stdin_is_read_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                            capsys: pytest.CaptureFixture[str]) -> None:
    # '-' reads standard input once; the whole-document fallback (a bare event array) replays the same bytes.
    data = json.dumps([_OP, _LAUNCH, _KERNEL]).encode()
    import io
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    monkeypatch.setattr(limits, "_stdin_data", None)
    assert main(["analyze", "-", "-f", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["trace"]["path"] == "-" and out["trace"]["event_count"] == 3


def test_stdin_size_is_bounded(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import io
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b" " * 2000)))
    monkeypatch.setattr(limits, "_stdin_data", None)
    monkeypatch.setattr(limits, "MAX_STDIN_BYTES", 1000)
    assert main(["analyze", "-"]) == 2
    assert "standard input" in capsys.readouterr().err


def test_kept_events_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(limits, "MAX_KEPT_EVENTS", 3)
    import phaseprof.trace.tables as tables
    monkeypatch.setattr(tables, "MAX_KEPT_EVENTS", 3)
    p = tmp_path / "many.json"
    p.write_bytes(_doc())
    _one_line(p, capsys, "at most")


def test_decompressed_size_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(limits, "MAX_TRACE_BYTES", 64)
    p = tmp_path / "big.json.gz"
    p.write_bytes(gzip.compress(_doc()))
    _one_line(p, capsys, "decompresses to more than")


@pytest.mark.parametrize("name", [f"ProfilerStep#{'7' * 5000}", "ProfilerStep#٣",
                                  "execute_context_1(" + "9" * 30 + ")_generation_0(0)",
                                  f"phaseprof_step#0_context_1({2**64})_generation_0(0)"])
def test_absurd_step_numbers_are_not_step_markers(name: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    # int() raised on 5,000 digits and a token count > 2^64 broke --format json; such a name is no marker any
    # writer produces, so it is an ordinary annotation and the steps come from elsewhere.
    from phaseprof.trace.markers import parse_step_marker

    assert parse_step_marker(name) is None
    step = {"ph": "X", "cat": "user_annotation", "name": name, "pid": 0, "tid": 1, "ts": 1, "dur": 50}
    p = tmp_path / "steps.json"
    p.write_bytes(_doc(step))
    assert main(["analyze", str(p), "-f", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["step_detection"]["method"] != "markers:profiler_step"


def test_real_step_markers_still_parse() -> None:
    from phaseprof.trace.markers import parse_step_marker

    m = parse_step_marker("execute_context_1(888_788544)_generation_0(0)")
    assert m is not None and (m.context_requests, m.context_tokens) == (1, 888)
    m = parse_step_marker("ProfilerStep#12")
    assert m is not None and m.index == 12


def test_kernels_without_any_runtime_call(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Found by the fuzz test: a real trace with its runtime events dropped raised IndexError in step detection.
    p = tmp_path / "no_runtime.json"
    p.write_text(json.dumps({"traceEvents": [_KERNEL, _with(_KERNEL, (("ts",), 40))]}))
    assert main(["analyze", str(p), "-f", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["totals"]["kernels"] == 2
