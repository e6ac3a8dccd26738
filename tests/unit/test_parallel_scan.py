"""Two native scanners on one chunked read (``phaseprof/trace/parallel_scan.py``) give exactly one scanner's tables.

The one-scanner native read is the reference here (``test_native_scan.py`` ties it to the pure-Python loader).
Chunks are handed to the second scanner by a fixed alternation instead of by queue room, so each test takes the
same path on any machine, and small pieces make many chunks: every committed trace, with the second scanner's
rows interleaved back between the first's. Also: what only one scanner can decide (a false separator on the
second thread, a process named differently in the two scanners' events) makes the read start again with one
scanner; the kept-events limit counts both scanners; an unmodelled event on the second thread falls back to the
pure-Python loader as on the first; rank workers never start a second scanner.
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import pytest

from phaseprof.errors import TraceError
from phaseprof.lean_process import PARALLEL_SCAN_ENV, init_rank_worker
from phaseprof.trace import native, parallel_scan, tables
from phaseprof.trace.parallel_scan import ParallelAbort, TwoScanners
from phaseprof.trace.read import load_tables
from phaseprof.trace.stream import stream_trace
from phaseprof.trace.tables import EventTables

from ..conftest import REPO
from .test_native_scan import COMMITTED, EAGER_DECODE, FRAMES, scanner_built  # noqa: F401 - the fixture
from .test_stream_loader import assert_same_tables

TRACES = [p for p in COMMITTED if p.name.endswith((".json.gz", ".json")) and "trace" in p.name]
FALSE_SEPARATOR = REPO / "traces" / "public-cut" / "v100_hta_ns_resolution_1step.json.gz"


@pytest.fixture
def alternating(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every other chunk to the second scanner, whatever the cores' speed."""
    monkeypatch.setattr(TwoScanners, "_to_second", lambda self, size: len(self._order) % 2 == 1)


def two_scanner_read(path: Path, piece_bytes: int) -> tuple[EventTables, TwoScanners]:
    two = TwoScanners(native.NativeTableBuilder(), start_bytes=0)
    try:
        s = stream_trace(path, None, piece_bytes=piece_bytes, chunks=two)
        assert s is not None
        two.close()
        merged = two.merged()
    finally:
        two.stop()
    return merged.finish(s.doc, path=str(path), sha256=s.sha256, decompressed_bytes=s.decompressed_bytes), two


def one_scanner_read(path: Path, monkeypatch: pytest.MonkeyPatch) -> EventTables:
    monkeypatch.setenv(PARALLEL_SCAN_ENV, "0")
    monkeypatch.setenv("PHASEPROF_SPLIT_READ", "0")
    t = load_tables(path, native=True)
    monkeypatch.delenv(PARALLEL_SCAN_ENV)
    return t


def spy_aborts(monkeypatch: pytest.MonkeyPatch) -> list[ParallelAbort]:
    """The ParallelAbort each two-scanner read raises from here on (the caller then reads with one)."""
    aborts: list[ParallelAbort] = []
    close, merged = TwoScanners.close, TwoScanners.merged

    def spied(method):  # type: ignore[no-untyped-def]
        def call(self: TwoScanners):  # type: ignore[no-untyped-def]
            try:
                return method(self)
            except ParallelAbort as e:
                aborts.append(e)
                raise
        return call

    monkeypatch.setattr(TwoScanners, "close", spied(close))
    monkeypatch.setattr(TwoScanners, "merged", spied(merged))
    return aborts


def test_committed_traces_same_tables(alternating: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every committed trace in 16 KB pieces, alternate chunks on each scanner: one scanner's tables."""
    interleaved = 0
    for path in TRACES:
        try:
            reference = one_scanner_read(path, monkeypatch)
        except TraceError:
            continue  # not a trace the tables are made of (test_native_scan checks its error both ways)
        try:
            got, two = two_scanner_read(path, 16 << 10)
        except ParallelAbort:
            assert path == FALSE_SEPARATOR, path  # the one committed trace with a false separator
            continue
        assert_same_tables(got, reference)
        for f in FRAMES:
            assert list(getattr(got, f).dtypes) == list(getattr(reference, f).dtypes), (path, f)
        interleaved += two._order.count(1) > 0 and two._order.count(0) > 0
    assert interleaved >= 10  # the rows of both scanners were merged, on most committed traces


def test_false_separator_on_the_second_thread_reads_again(alternating: None,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A chunk cut at a false separator cannot be retried on the second thread: the read starts again with one
    scanner, and the tables are that read's."""
    with pytest.raises(ParallelAbort):
        two_scanner_read(FALSE_SEPARATOR, 4 << 10)
    monkeypatch.setattr("phaseprof.trace.stream.PIECE_BYTES", 4 << 10)
    aborts = spy_aborts(monkeypatch)
    monkeypatch.setenv(PARALLEL_SCAN_ENV, "1")
    got = load_tables(FALSE_SEPARATOR, native=True)
    assert aborts
    assert_same_tables(got, one_scanner_read(FALSE_SEPARATOR, monkeypatch))


def test_process_named_differently_in_the_two_halves(tmp_path: Path, alternating: None,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The later process_name event wins; which one is later only one scanner knows: the read starts again."""
    data = gzip.decompress(EAGER_DECODE.read_bytes())
    m = re.search(rb'\{"name":\s?"process_name",\s?"ph":\s?"M",[^{}]*"args":\s?\{"name":\s?"[^"]*"\}\}', data)
    assert m is not None, "the capture names its processes (at the end of its events)"
    renamed = re.sub(rb'("args":\s?\{"name":\s?")[^"]*', rb"\1renamed", m.group(0))
    # the same process renamed every ~100 KB before its own event: both scanners hold a name for it, and the
    # one holding the end of the array holds the other name
    parts, at = [], 0
    while (cut := data.find(b"}, {", at + (100 << 10), m.start())) > 0:
        parts += [data[at:cut + 1], b", " + renamed]
        at = cut + 1
    edited = tmp_path / "trace.json"
    edited.write_bytes(b"".join([*parts, data[at:]]))
    monkeypatch.setattr("phaseprof.trace.stream.PIECE_BYTES", 64 << 10)
    monkeypatch.setenv("PHASEPROF_SPLIT_READ", "0")
    aborts = spy_aborts(monkeypatch)
    monkeypatch.setenv(PARALLEL_SCAN_ENV, "1")
    got = load_tables(edited, native=True)
    assert aborts and "named differently" in str(aborts[0])
    assert got.meta.process_names == load_tables(edited, native=False).meta.process_names
    assert_same_tables(got, one_scanner_read(edited, monkeypatch))


def test_kept_limit_counts_both_scanners(alternating: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The limit on kept events holds for the two scanners together, with the one-scanner read's message."""
    reference = one_scanner_read(EAGER_DECODE, monkeypatch)
    kept = sum(len(getattr(reference, f)) for f in FRAMES)
    monkeypatch.setattr(tables, "MAX_KEPT_EVENTS", kept * 2 // 3)  # each scanner alone stays below it
    monkeypatch.setattr("phaseprof.trace.stream.PIECE_BYTES", 64 << 10)
    monkeypatch.setenv("PHASEPROF_SPLIT_READ", "0")
    monkeypatch.setenv(PARALLEL_SCAN_ENV, "1")
    with pytest.raises(TraceError) as two:
        load_tables(EAGER_DECODE, native=True)
    monkeypatch.setenv(PARALLEL_SCAN_ENV, "0")
    with pytest.raises(TraceError) as one:
        load_tables(EAGER_DECODE, native=True)
    assert str(two.value) == str(one.value)
    assert "kernels, runtime calls, CPU ops and allocator events" in str(one.value)


def test_unmodelled_event_on_the_second_thread_falls_back(tmp_path: Path, alternating: None,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The scanner refusing an event on the second thread: the automatic path reads with the pure-Python
    loader, as when the first refuses it (``test_native_scan.test_unmodelled_input_falls_back``)."""
    data = gzip.decompress(EAGER_DECODE.read_bytes())
    last = list(re.finditer(rb'"cat":\s?"kernel",\s?"name":\s?"[^"]*"', data))[-1]
    edited = tmp_path / "trace.json"
    edited.write_bytes(data[:last.start()] + b'"cat": "kernel", "name": 7' + data[last.end():])
    monkeypatch.setattr("phaseprof.trace.stream.PIECE_BYTES", 64 << 10)
    monkeypatch.setenv("PHASEPROF_SPLIT_READ", "0")
    monkeypatch.setenv(PARALLEL_SCAN_ENV, "1")
    with pytest.raises(native.NativeUnsupported):
        load_tables(edited, native=True)
    assert_same_tables(load_tables(edited), load_tables(edited, native=False))


def test_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PARALLEL_SCAN_ENV, "1")
    assert parallel_scan.wanted() == 0
    monkeypatch.setenv(PARALLEL_SCAN_ENV, "0")
    assert parallel_scan.wanted() is None
    monkeypatch.delenv(PARALLEL_SCAN_ENV)
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0})
    assert parallel_scan.wanted() is None  # one CPU: nothing to share the scan with
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1})
    assert parallel_scan.wanted() == TwoScanners.START_BYTES
    monkeypatch.setattr("os.environ", dict(__import__("os").environ))
    init_rank_worker()
    assert parallel_scan.wanted() is None  # rank workers already fill the cores


def test_second_scanner_starts_after_start_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Below ``start_bytes`` one scanner reads (no thread); past it, the second takes chunks while it has room,
    and the tables are the same."""
    size = len(gzip.decompress(EAGER_DECODE.read_bytes()))
    monkeypatch.setattr(TwoScanners, "DEPTH", 64)
    late = TwoScanners(native.NativeTableBuilder(), start_bytes=size // 2)
    never = TwoScanners(native.NativeTableBuilder(), start_bytes=2 * size)
    results = []
    for two in (late, never):
        s = stream_trace(EAGER_DECODE, None, piece_bytes=64 << 10, chunks=two)
        assert s is not None
        two.close()
        results.append(two.merged().finish(s.doc, path=str(EAGER_DECODE), sha256=s.sha256,
                                           decompressed_bytes=s.decompressed_bytes))
    assert never._thread.ident is None and set(never._order) == {0}
    first_on_thread = late._order.index(1)
    assert late._thread.ident is not None and set(late._order[:first_on_thread]) == {0}
    assert 0.3 < first_on_thread / len(late._order) < 0.7  # chunks are ~64 KB: half the bytes, half the chunks
    assert_same_tables(results[0], results[1])


def test_second_scanner_only_while_the_scan_is_behind() -> None:
    """Chunks go to the second scanner only while the inflating thread waits for the scan (its queue full)."""
    runs = {}
    for behind in (False, True):
        two = TwoScanners(native.NativeTableBuilder(), start_bytes=0, behind=lambda b=behind: b)
        try:
            s = stream_trace(EAGER_DECODE, None, piece_bytes=64 << 10, chunks=two)
            assert s is not None
            two.close()
            runs[behind] = (two.merged().finish(s.doc, path=str(EAGER_DECODE), sha256=s.sha256,
                                                decompressed_bytes=s.decompressed_bytes), bytes(two._order))
        finally:
            two.stop()
    assert set(runs[False][1]) == {0} and 1 in runs[True][1]
    assert_same_tables(runs[False][0], runs[True][0])
