"""A trace read ahead on a thread (``trace.readahead.ReadAhead``, what ``phaseprof analyze`` starts before its
imports) gives exactly the tables, or the error, of the loader's own read: native and pure-Python, on every
committed trace, with tiny pieces, on bad input; and it stops its thread when the read ends early."""

from __future__ import annotations

import gzip
import json
import threading
from pathlib import Path

import pytest

from phaseprof.errors import TraceError
from phaseprof.lean_process import SPLIT_ENV
from phaseprof.trace import limits
from phaseprof.trace.read import load_tables
from phaseprof.trace.readers import Reader
from phaseprof.trace.readahead import ReadAhead
from phaseprof.trace.tables import EventTables

from .test_bad_input import CASES as BAD_INPUTS
from .test_split_read import COMMITTED, assert_same_tables


def _load(path: Path, *, ahead: bool, reader: Reader = Reader.AUTO, **kw: object) -> EventTables | str:
    try:
        return load_tables(path, ahead=ReadAhead(path, **kw) if ahead else None, reader=reader)
    except TraceError as e:
        return f"TraceError: {e}"


def _same(a: EventTables | str, b: EventTables | str) -> None:
    if isinstance(a, str) or isinstance(b, str):
        assert a == b
    else:
        assert_same_tables(a, b)


@pytest.fixture(autouse=True)
def _one_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SPLIT_ENV, "0")


@pytest.mark.parametrize("native", [True, False], ids=["native", "pure-Python"])
@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.parent.name[-50:] + "/" + p.name.split(".json")[0])
def test_read_ahead_gives_the_same_tables(path: Path, native: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    from phaseprof.trace import native as scanner

    if native and not scanner.available():
        pytest.skip("the native scanner is not built")
    reader = Reader.NATIVE if native else Reader.PYTHON
    _same(_load(path, ahead=True, reader=reader), _load(path, ahead=False, reader=reader))


def test_tiny_pieces() -> None:
    path = COMMITTED[0]
    _same(_load(path, ahead=True, piece_bytes=4096), _load(path, ahead=False))


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_gives_the_same_error(case: str, tmp_path: Path) -> None:
    make, _ = BAD_INPUTS[case]
    path = make(tmp_path)
    _same(_load(path, ahead=True), _load(path, ahead=False))


def test_a_limit_hit_on_the_thread_is_raised_by_the_reader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "MAX_TRACE_BYTES", 1 << 16)
    events = [{"ph": "X", "cat": "kernel", "name": f"k{i}", "ts": i, "dur": 1, "pid": 0, "tid": 7} for i in range(5000)]
    path = tmp_path / "big.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    got = _load(path, ahead=True)
    assert isinstance(got, str) and "decompresses to more than" in got and str(path) in got
    assert got == _load(path, ahead=False)


def test_closing_early_stops_the_thread() -> None:
    ahead = ReadAhead(COMMITTED[0], piece_bytes=4096)
    pieces = ahead.pieces()
    assert next(pieces)
    pieces.close()
    assert not ahead._thread.is_alive()
    with pytest.raises(RuntimeError):
        ahead.pieces()
    unread = ReadAhead(COMMITTED[0], piece_bytes=4096)
    unread.close()
    assert not unread._thread.is_alive()
    assert not [t for t in threading.enumerate() if t.name == "phaseprof-readahead"]


# --- the read into reused buffers (``Slot`` pieces, ISA-L's reader inflating into them) ---------------------------

def _counting_in_slot(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    from phaseprof.trace import stream

    seen = {"in place": 0, "as bytes": 0}
    real = stream._in_slot

    def counted(*a: object) -> object:
        got = real(*a)
        seen["in place" if got is not None else "as bytes"] += 1
        return got

    monkeypatch.setattr(stream, "_in_slot", counted)
    return seen


@pytest.mark.parametrize("plain", [False, True], ids=["gzip", "plain JSON"])
def test_pieces_are_read_into_reused_buffers_and_scanned_there(plain: bool, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("isal")
    path = COMMITTED[0]
    if plain:
        path = tmp_path / "trace.json"
        path.write_bytes(gzip.decompress(COMMITTED[0].read_bytes()))
    seen = _counting_in_slot(monkeypatch)
    ahead = ReadAhead(path, piece_bytes=16384)
    got = load_tables(path, ahead=ahead)
    assert seen["in place"] > 0.8 * (seen["in place"] + seen["as bytes"]), seen
    assert 0 < ahead._made <= ReadAhead.DEPTH + 2  # buffers reused, not one per piece
    assert ahead._free.empty() and not ahead._thread.is_alive()  # none outlives the read (they held ~10 MB)
    _same(got, _load(path, ahead=False))


def test_carried_bytes_too_long_for_the_room_go_the_bytes_way(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("isal")
    from phaseprof.trace import readahead

    # The carry is what follows the first separator in the last 4 KB (stream._cut): 3.8-4.1 KB here, so some fit
    monkeypatch.setattr(readahead, "SLOT_ROOM", 4000)
    seen = _counting_in_slot(monkeypatch)
    path = COMMITTED[0]
    ahead = ReadAhead(path, piece_bytes=8192)
    _same(load_tables(path, ahead=ahead), _load(path, ahead=False))
    assert seen["as bytes"] > 0 and seen["in place"] > 0, seen
    assert ahead._made <= ReadAhead.DEPTH + 2  # the bytes way gives its buffer back too


class _FailingReader:
    """ISA-L's reader that raises after ``after`` pieces: the reference read must resume at the same byte."""

    def __init__(self, after: int, error: Exception) -> None:
        self.after, self.error = after, error

    def __call__(self, fp: object, size: int) -> object:
        from isal import isal_zlib

        inner, outer = isal_zlib._GzipReader(fp, size), self

        class Reader:
            def readinto(self, b: object) -> int:
                if outer.after == 0:
                    raise outer.error
                outer.after -= 1
                return inner.readinto(b)

        return Reader()


@pytest.mark.parametrize("after", [0, 1, 5])
def test_a_failing_fast_read_is_resumed_by_the_reference_read(after: int, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("isal")
    from phaseprof.trace import readahead

    monkeypatch.setattr(readahead, "_gzip_reader", lambda: _FailingReader(after, OSError("injected")))
    path = COMMITTED[0]
    _same(_load(path, ahead=True, piece_bytes=16384), _load(path, ahead=False))


def test_a_limit_hit_in_the_fast_read_is_its_own_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("isal")
    monkeypatch.setattr(limits, "MAX_WHITESPACE_RUN", 1 << 21)
    path = tmp_path / "blank.json.gz"
    path.write_bytes(gzip.compress(b'{"traceEvents": [' + b" " * (5 << 20) + b"]}"))
    got = _load(path, ahead=True)
    assert isinstance(got, str) and "nothing but whitespace" in got and str(path) in got
    assert got == _load(path, ahead=False)


def test_the_librarys_read_of_a_big_trace_inflates_on_a_thread_not_in_two_processes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``load_tables`` of a trace big enough to split, with the native scanner: one inflate on a thread beside the
    scan (faster than the split read since the seventh pass), closed after; the same tables. With
    ``PHASEPROF_SPLIT_READ=1`` (and for the pure-Python decoder) the split read as before."""
    from phaseprof.trace import native as scanner
    from phaseprof.trace import read

    if not scanner.available():
        pytest.skip("the native scanner is not built")
    path = COMMITTED[0]
    made: list[ReadAhead] = []
    splits: list[int] = []

    def reading_ahead(*a: object, **k: object) -> ReadAhead:
        made.append(ReadAhead(*a, **k))
        return made[-1]

    real_split = read.load_split
    monkeypatch.setattr(read, "split_point", lambda p: 1 << 10)  # big enough to split, whatever its size
    monkeypatch.setattr(read, "ReadAhead", reading_ahead)
    monkeypatch.setattr(read, "load_split", lambda *a, **k: (splits.append(1), real_split(*a, **k))[1])
    monkeypatch.delenv(SPLIT_ENV, raising=False)
    got = load_tables(path)
    assert len(made) == 1 and made[0].taken() and not made[0]._thread.is_alive() and not splits
    _same(got, _load(path, ahead=False, reader=Reader.PYTHON))
    monkeypatch.setenv(SPLIT_ENV, "1")
    _same(load_tables(path), got)
    assert len(made) == 1 and splits  # asked for: the split read
    splits.clear()
    monkeypatch.delenv(SPLIT_ENV)
    _same(load_tables(path, reader=Reader.PYTHON), got)
    assert len(made) == 1 and splits  # the pure-Python decoder: the split read


def test_public_trace_read_ahead_into_buffers(public_trace: Path) -> None:
    """The public set (``public`` tier): read ahead into reused buffers, the same tables or error as the loader's
    own read."""
    _same(_load(public_trace, ahead=True), _load(public_trace, ahead=False))
