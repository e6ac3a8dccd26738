"""One chunked read scanned by two native scanners: the reading thread's and one on a thread of its own.

Why: on a multi-GB trace the scan is the read's longest stage and ran on one core, while the thread inflating the
pieces (``trace.readahead``) was idle more than half the time (2.1 GB: the scan ~5 s, the inflate 2.2 s of CPU).
Chunks are independent once cut at event boundaries, so the stream's cutter (``trace.stream``) hands each chunk
to the second scanner while that one's queue has room and scans it itself otherwise: the two share the work in
whatever proportion the cores allow, and at most :attr:`TwoScanners.DEPTH` chunks wait (bounded memory).

Each scanner keeps its rows in the order it saw them and the order of the chunks is recorded, so
:meth:`TwoScanners.merged` lays every column out in file order again, the second scanner's name and id codes
mapped onto the first's (as the split read's ``TableBuilder.absorb`` does): the tables are those of one scanner
(``tests/unit/test_parallel_scan.py`` compares them on every committed trace).

What cannot be decided without order: a chunk the second scanner finds cut at a false separator (the reading
thread retries its own with the next piece merged in, ``trace.stream``), and a process named differently in
the two halves' events (the later event wins). Both raise :class:`ParallelAbort`: the caller reads the trace
again with one scanner. Neither occurs in the committed and public traces but one (a false separator in HTA's
ns-resolution trace).
"""

from __future__ import annotations

import ctypes
import os
import queue
import threading
from collections.abc import Callable

import numpy as np

from phaseprof.lean_process import PARALLEL_SCAN_ENV
from phaseprof.trace import native, tables
from phaseprof.trace.native import _FAMILIES, _MEMORY_COLUMNS, NativeSyntaxError, NativeTableBuilder
from phaseprof.trace.tables import _FAMILY_COLUMNS, _Growing

#: Bytes after each queued chunk: the scanner reads its input followed by zero padding in place
#: (``pp_add_in_place`` borrows 64 bytes after the chunk).
_ROOM = 128
#: The families in the order of :func:`_rows`' counts (the scanner's ABI order, then the allocator events).
_ALL = (*_FAMILIES, "memory")
#: Queued after the last chunk of a run the thread scans: it counts its rows then.
_RUN_END = bytearray()


class ParallelAbort(Exception):
    """The two scanners cannot reproduce the one-scanner read of this trace: read it again with one."""


def wanted() -> int | None:
    """After how many decompressed bytes a second scanner starts (None: never). ``PHASEPROF_PARALLEL_SCAN``: 0
    never, 1 from the first chunk (tests); unset: after :attr:`TwoScanners.START_BYTES`, where this process may
    run on two or more CPUs (rank workers set 0: the workers already fill the cores)."""
    mode = os.environ.get(PARALLEL_SCAN_ENV, "")
    if mode in ("0", "1"):
        return 0 if mode == "1" else None
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return TwoScanners.START_BYTES if cpus >= 2 else None


def _rows(b: NativeTableBuilder) -> tuple[int, ...]:
    """Rows each family of ``b``'s scanner holds (:data:`_ALL` order)."""
    out = (ctypes.c_uint64 * len(_ALL))()
    b._lib.pp_rows(b._h, out)
    return tuple(out)


class TwoScanners:
    """A :data:`~phaseprof.trace.stream.Chunks` sink that scans with ``first`` (on the calling thread) and a second
    :class:`NativeTableBuilder` on a thread of its own, started when the first chunk goes to it. After the read: :meth:`close`, then :meth:`merged`
    (``first``, holding every row in file order); :meth:`stop` instead when the read is abandoned."""

    #: Chunks (~1 MB each) waiting for the second scanner at most.
    DEPTH = 2
    #: Decompressed bytes scanned here before the second scanner starts. Below this the read is not what the
    #: process waits for (``phaseprof analyze`` of 115 MB waits for its imports, which hold the GIL, and two
    #: scanners raised its peak by 5 MiB: measured), and above it the scan is (2.1 GB: ~5 s of one core).
    START_BYTES = 128 << 20

    def __init__(self, first: NativeTableBuilder, *, start_bytes: int | None = None,
                 behind: Callable[[], bool] | None = None) -> None:
        """``start_bytes``: :attr:`START_BYTES` unless given (0: from the first chunk). ``behind``: whether the
        scan is what the read waits for (the thread inflating ahead mostly waits for room: ``ReadAhead.waits``);
        None: always."""
        self.first = first
        self._behind = behind
        self.second = NativeTableBuilder()
        self._order = bytearray()  # per chunk, in file order: 0 scanned here, 1 by the thread
        # each scanner's rows per family at the end of each of its runs of consecutive chunks (counted only
        # there: each count is 6 calls into the scanner, and each call waits for the GIL while imports hold it)
        self._counts: tuple[list[tuple[int, ...]], list[tuple[int, ...]]] = ([], [])
        self._queue: queue.Queue[bytearray | None] = queue.Queue(self.DEPTH)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="phaseprof-scan", daemon=True)
        self._wait = self.START_BYTES if start_bytes is None else start_bytes  # bytes before the thread starts

    def __call__(self, data: bytes | bytearray | memoryview) -> int:
        """Scan one chunk (here or queued); the events counted here (queued ones are counted by the thread)."""
        if self._error is not None:
            self.close()  # raises it
        last = self._order[-1] if self._order else None
        if self._to_second(len(data)):
            if self._thread.ident is None:
                self._thread.start()
            if last == 0:  # a run of chunks scanned here ends
                self._counts[0].append(_rows(self.first))
            n = len(data)
            chunk = bytearray(n + _ROOM)
            chunk[:n] = data
            self._queue.put(chunk)
            self._order.append(1)
            events = 0
        else:
            events = self.first.add_json(data)  # raises NativeSyntaxError: the stream retries with more bytes
            if last == 1:  # the thread's run ends: it counts once it has scanned the run
                self._queue.put(_RUN_END)
            self._order.append(0)
        native.check_kept(self.first._kept + self.second._kept)
        return events

    def _to_second(self, size: int) -> bool:
        """Whether the next chunk (``size`` bytes) goes to the second scanner: once :attr:`START_BYTES` are
        scanned, while its queue has room (one producer: room now is room at the put) and the scan is behind the
        inflate. Why the last: where inflating and scanning already keep two cores busy (the H200 host's Xeon at
        2.1 GB, measured: two scanners 5.7 s, one 5.0) a second scanner only adds its copies and the merge; on
        this project's AMD EPYC VM the inflating thread waited 3.5 of 5.7 s for one scanner."""
        if self._wait > 0:
            self._wait -= size
            return False
        return not self._queue.full() and (self._behind is None or self._behind())

    def _run(self) -> None:
        try:
            while (chunk := self._queue.get()) is not None:
                if chunk is _RUN_END:
                    self._counts[1].append(_rows(self.second))
                    continue
                with memoryview(chunk) as view:
                    self.second.add_json(view[:len(chunk) - _ROOM])
        except BaseException as e:  # noqa: BLE001 - raised by close() on the reading thread
            self._error = e
            while self._queue.get() is not None:  # keep taking chunks: the producer never blocks
                pass

    def stop(self) -> None:
        """End the thread, forget its error and let go of both scanners. Why the last: this object and its thread
        refer to each other, so it is freed only by the cyclic GC, which ``phaseprof analyze`` keeps off during
        the read and then freezes what exists (``report.analyze_plain_cli``): the first scanner's columns, which
        the tables no longer need, stayed (+8 MiB of peak at 115 MB, measured)."""
        self._end()
        self._error = None
        self.first = self.second = None  # type: ignore[assignment]

    def _end(self) -> None:
        if self._thread.is_alive():
            if self._order and self._order[-1] == 1:
                self._queue.put(_RUN_END)
            self._queue.put(None)
            self._thread.join()

    def close(self) -> None:
        """Wait for the queued chunks; raise what the second scanner raised (a false separator there:
        :class:`ParallelAbort`)."""
        self._end()
        error, self._error = self._error, None
        if isinstance(error, NativeSyntaxError):
            raise ParallelAbort("a chunk scanned on the second thread was cut at a false separator") from error
        if error is not None:
            raise error

    def merged(self) -> NativeTableBuilder:
        """``first`` holding both scanners' rows in file order (both scanners freed)."""
        a, b = self.first, self.second
        if self._order and self._order[-1] == 0:
            self._counts[0].append(_rows(a))
        a._materialise()
        b._materialise()
        clash = {k for k in a._process_names.keys() & b._process_names.keys()
                 if a._process_names[k] != b._process_names[k]}
        if clash:
            raise ParallelAbort(f"process {sorted(clash)[0]!r} is named differently in the two scanners' events")
        names = np.asarray([a._names.code(v) for v in b._names._table], dtype=np.int32)
        ids = np.asarray([a._ids.code(v) for v in b._ids._table], dtype=np.int32)
        for k, v in b._process_names.items():
            a._process_names[k] = v
        order = np.frombuffer(bytes(self._order), dtype=np.uint8)
        for i, f in enumerate(_ALL):
            columns = _MEMORY_COLUMNS if f == "memory" else _FAMILY_COLUMNS
            spans = _spans(order, [np.asarray([c[i] for c in counts], dtype=np.int64) for counts in self._counts])
            for c, dtype in columns:
                remap = names if c in ("name", "launched_kernel") else ids if c in ("pid", "tid") else None
                a._cols[f][c] = _merged_column(a._cols[f].get(c), b._cols[f].get(c), spans, dtype, remap)
            for col in (a._cols[f], b._cols[f]):
                for c in [c for c, g in col.items() if g.size == 0]:
                    del col[c]
        a.event_count += b.event_count
        a._kept += b._kept
        b._cols.clear()
        return a


def _spans(order: np.ndarray, cumulative: list[np.ndarray]) -> list[tuple[int, int, int]]:
    """(scanner, start row, end row) of each run of consecutive chunks one scanner holds, in file order, for one
    family; ``cumulative[s]``: that family's rows in scanner ``s`` at the end of each of its runs."""
    spans: list[tuple[int, int, int]] = []
    at = [0, 0]
    k = [0, 0]
    if not order.size:
        return spans
    for lo in [0, *(np.flatnonzero(np.diff(order)) + 1).tolist()]:
        s = int(order[lo])
        end = int(cumulative[s][k[s]])
        k[s] += 1
        if end > at[s]:
            spans.append((s, at[s], end))
            at[s] = end
    if k != [len(cumulative[0]), len(cumulative[1])]:
        raise ParallelAbort(f"rows counted for {[len(c) for c in cumulative]} runs, {k} in the order")
    return spans


def _merged_column(a: _Growing | None, b: _Growing | None, spans: list[tuple[int, int, int]], dtype: type,
                   remap: np.ndarray | None) -> _Growing:
    """One column of both scanners in file order (``b``'s codes through ``remap``)."""
    if b is None or b.size == 0:
        return a if a is not None else _Growing()
    if (a is None or a.size == 0) and remap is None:
        return b
    if (a is not None and a.data is None and a.const is not None and b.data is None and b.const is not None
            and remap is None and a.const[0] == b.const[0]):  # one value in both: still one constant run
        a.size += b.size
        return a
    parts = (a.array(dtype) if a is not None else np.zeros(0, dtype=dtype),
             remap[b.array(dtype)].astype(dtype, copy=False) if remap is not None else b.array(dtype))
    return _Growing.of(np.concatenate([parts[s][lo:hi] for s, lo, hi in spans]))
