"""The split read (two processes, one half of the events each: ``trace.split_read.load_split``) gives exactly the
tables of the one-process read, or declines (None) so that the one-process read runs: on every committed and
public trace, at split points everywhere in a small trace with tiny pieces, and on inputs made to trip it."""

from __future__ import annotations

import dataclasses
import gzip
import json
import threading
from pathlib import Path

import pandas.testing as pdt
import pytest

from phaseprof.errors import TraceError
from phaseprof.lean_process import SPLIT_ENV
from phaseprof.trace import split_read, stream
from phaseprof.trace.read import load_tables
from phaseprof.trace.tables import EventTables

from ..conftest import PUBLIC_CUT_DIR, PUBLIC_DIR, REPO
from .test_bad_input import CASES as BAD_INPUTS

COMMITTED = sorted((REPO / "traces").rglob("*.json.gz"))
PUBLIC = sorted(PUBLIC_DIR.glob("*.json.gz")) if PUBLIC_DIR.is_dir() else []
FRAMES = ("gpu", "runtime", "ops", "gpu_annotations", "memory", "modules")


def assert_same_tables(a: EventTables, b: EventTables) -> None:
    assert dataclasses.asdict(a.meta) == dataclasses.asdict(b.meta)
    for f in FRAMES:
        pdt.assert_frame_equal(getattr(a, f), getattr(b, f), check_exact=True, check_categorical=True, obj=f)


_REAL_ACTIVE_COUNT = threading.active_count


@pytest.fixture(autouse=True)
def _no_lingering_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """The split read declines in a program with other threads; earlier tests of the suite leave some behind
    (an in-process vLLM engine's), so these tests see only their own: the guard itself is tested below."""
    monkeypatch.setattr(threading, "active_count", lambda: 1)


def one_process(path: Path, monkeypatch: pytest.MonkeyPatch) -> EventTables | str:
    monkeypatch.setenv(SPLIT_ENV, "0")
    try:
        return load_tables(path)
    except TraceError as e:
        return f"TraceError: {e}"


@pytest.mark.parametrize("path", COMMITTED + PUBLIC, ids=lambda p: p.name.split(".json")[0][-60:])
def test_split_read_gives_the_same_tables(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    whole = one_process(path, monkeypatch)
    monkeypatch.setenv(SPLIT_ENV, "1")
    at = split_read.split_point(path)
    assert at is not None
    split = split_read.load_split(path, at, None)
    assert split is not None, "declined: the split read did not run"
    assert_same_tables(split, whole)
    assert_same_tables(load_tables(path), whole)


def test_split_anywhere_with_tiny_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    path = sorted(PUBLIC_CUT_DIR.glob("*.json.gz"))[0]
    whole = one_process(path, monkeypatch)
    size = len(gzip.decompress(path.read_bytes()))
    monkeypatch.setattr(stream, "PIECE_BYTES", 4096)
    ran = 0
    for at in sorted({0, 1, 17, 500, 4095, 4096, 4097, *range(0, size, size // 23), size - 300, size - 1, size,
                      size + 10_000}):
        got = split_read.load_split(path, at, None)
        if got is not None:
            ran += 1
            assert_same_tables(got, whole)
    assert ran >= 15


def kineto_doc(n: int, *, trap: str = "") -> dict:
    evs = []
    for i in range(n):
        evs.append({"ph": "X", "cat": "cpu_op", "name": f"aten::mm{trap if i == n // 2 else ''}", "pid": 1,
                    "tid": 1, "ts": 1000 + 10 * i, "dur": 5, "args": {"External id": i}})
        evs.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                    "ts": 1001 + 10 * i, "dur": 2, "args": {"correlation": i, "External id": i}})
        evs.append({"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 1003 + 10 * i,
                    "dur": 4, "args": {"correlation": i, "device": 0, "stream": 7}})
    return {"schemaVersion": 1, "traceEvents": evs, "traceName": "t"}


def test_false_separator_at_the_split_declines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A name holding ``}, {`` right at the split point: the first half's last chunk does not decode, so the
    split read declines and the one-process read gives the tables."""
    trap = '}, {"ph": "X", "cat": "kernel", "name": "fake", "ts": 1, "dur": 1}, {'
    text = json.dumps(kineto_doc(400, trap=trap))
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(text.encode()))
    at = text.index("aten::mm}") + len("aten::mm")
    assert split_read.load_split(p, at, None) is None
    whole = one_process(p, monkeypatch)
    monkeypatch.setenv(SPLIT_ENV, "1")
    assert_same_tables(load_tables(p), whole)
    assert any(n.startswith("aten::mm}") for n in whole.ops["name"].cat.categories)


def test_keys_on_both_sides_and_process_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = kineto_doc(300)
    doc["traceEvents"][5:5] = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "first"}}]
    doc["traceEvents"].append({"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "last"}})
    doc["traceEvents"].append({"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 1500,
                               "args": {"Bytes": 64, "Total Allocated": 64, "Device Type": 1, "Device Id": 0}})
    doc = {"deviceProperties": [{"id": 0, "name": "X"}], **doc, "baseTimeNanoseconds": 5}
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(json.dumps(doc, indent=1).encode()))
    whole = one_process(p, monkeypatch)
    for at in range(0, len(json.dumps(doc, indent=1)), 997):
        got = split_read.load_split(p, at, None)
        if got is not None:
            assert_same_tables(got, whole)
    assert whole.meta.process_names == {"1": "last"}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_gives_the_same_error(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make, _ = BAD_INPUTS[case]
    path = make(tmp_path)
    whole = one_process(path, monkeypatch)
    monkeypatch.setenv(SPLIT_ENV, "1")
    try:
        got: EventTables | str = load_tables(path)
    except TraceError as e:
        got = f"TraceError: {e}"
    if isinstance(whole, str) or isinstance(got, str):
        assert got == whole
    else:
        assert_same_tables(got, whole)


def test_no_split_in_a_threaded_program(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forking while other threads run (the dashboard's server) could leave the child on a lock held by one."""
    monkeypatch.setenv(SPLIT_ENV, "1")
    path = COMMITTED[0]
    assert split_read.split_point(path) is not None  # no other thread (as the fixture makes it look)
    monkeypatch.setattr(threading, "active_count", _REAL_ACTIVE_COUNT)
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        assert split_read.split_point(path) is None
    finally:
        stop.set()
        t.join()
    monkeypatch.setenv(SPLIT_ENV, "0")
    assert split_read.split_point(path) is None
