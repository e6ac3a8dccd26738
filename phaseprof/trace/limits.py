"""Where a trace's bytes come from, and the bounds on reading them (hostile or broken input must end quickly).

- A path must name a regular file: a FIFO would block forever, ``/dev/zero`` never ends, a socket cannot be
  re-read. ``-`` means standard input: read once (at most :data:`MAX_STDIN_BYTES`), kept in memory, so the
  whole-document fallback sees the same bytes the chunked reader saw.
- gzip is read like ``gzip -dc`` does: every member of a multi-member file (``cat a.gz b.gz``), trailing zero
  padding ignored.
- Decompressed size, whitespace runs and the whole-document path's memory are bounded by the constants below;
  past them the read stops with one line naming the file.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import stat
import sys
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from phaseprof.errors import PhaseprofError, TraceError

STDIN = "-"
#: Compressed bytes read from standard input at most (it is held in memory to be read twice if need be).
MAX_STDIN_BYTES = 1 << 30
#: Decompressed bytes of one trace at most: the largest public trace in shared/traces/public inflates to 55 MB;
#: 40x that still reads (2 GB of events phaseprof drops: ~10 s, benchmarks/bench_bombs.py); 5 GB is a bomb.
MAX_TRACE_BYTES = 2 << 30
#: Consecutive whitespace bytes at most. JSON allows any amount, a profiler writes a few per event; 16 MB of
#: nothing but blanks is a gzip bomb (a 5 MB file inflates to 5 GB of spaces), not a trace.
MAX_WHITESPACE_RUN = 16 << 20
#: The whole-document fallback (odd shapes, lenient types) holds all decompressed bytes and every event struct at
#: once; above this size it is refused rather than run out of memory (the chunked reader has no such limit).
MAX_WHOLE_DOCUMENT_BYTES = 512 << 20
GZIP_MAGIC = b"\x1f\x8b"
_WS = b" \t\n\r"
_WS_BYTES = frozenset(_WS)
_stdin_data: bytes | None = None  # standard input, read once per process


def require_regular_file(path: str | Path, *, what: str = "file", error: type[PhaseprofError] = PhaseprofError
                         ) -> Path:
    """``path`` if it names a readable regular file (symlinks followed); else ``error`` naming it and why."""
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise error("no such file", path=p) from None
    except OSError as e:
        raise error(f"cannot read {what}: {e.strerror}", path=p) from None
    if stat.S_ISDIR(st.st_mode):
        raise error(f"is a directory, not a {what}", path=p)
    if not stat.S_ISREG(st.st_mode):
        raise error(f"not a regular file (a FIFO, device or socket); phaseprof reads regular files"
                    f"{' or - for stdin' if what == 'trace file' else ''}", path=p)
    return p


def _read_stdin() -> bytes:
    global _stdin_data
    if _stdin_data is None:
        data = sys.stdin.buffer.read(MAX_STDIN_BYTES + 1)
        if len(data) > MAX_STDIN_BYTES:
            raise TraceError(f"more than {MAX_STDIN_BYTES >> 20} MB on standard input", path=STDIN)
        _stdin_data = data
    return _stdin_data


@contextlib.contextmanager
def open_trace(path: str | Path) -> Iterator[BinaryIO]:
    """The stored bytes of a trace file, or of standard input for ``-`` (read once, replayed after)."""
    if str(path) == STDIN:
        yield io.BytesIO(_read_stdin())
        return
    p = require_regular_file(path, what="trace file", error=TraceError)
    try:  # O_NONBLOCK: should the path have become a FIFO since the check, opening it must not block either
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise TraceError(f"cannot read: {e.strerror}", path=p) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise TraceError("not a regular file (a FIFO, device or socket)", path=p)
    with os.fdopen(fd, "rb") as f:
        yield f


def _inflater() -> tuple[Callable[..., Any], type[Exception]]:
    """``decompressobj`` and its error class: ISA-L's (the optional ``isal`` package: inflates a Kineto trace
    ~2x faster, measured 0.11 s vs 0.24 s for 154 MB) when installed, else the standard library's zlib."""
    try:
        from isal import isal_zlib
    except ImportError:
        return zlib.decompressobj, zlib.error
    return isal_zlib.decompressobj, isal_zlib.error


def inflate(blocks: Iterator[bytes], piece_bytes: int) -> Iterator[bytes]:
    """gzip-decompress ``blocks`` as ``gzip -dc`` does: all members in turn, trailing zero bytes ignored.

    Raises ``zlib.error`` for a corrupt member (whichever inflater ran), ``EOFError`` for a truncated one.
    """
    decompressobj, error = _inflater()
    try:
        yield from _inflate(blocks, piece_bytes, decompressobj)
    except error as e:
        if error is zlib.error:
            raise
        raise zlib.error(str(e)) from None


def _inflate(blocks: Iterator[bytes], piece_bytes: int, decompressobj: Callable[..., Any]) -> Iterator[bytes]:
    d: Any = None  # the member's decompressor; None between members
    for block in blocks:
        pending = block
        while pending:
            if d is None:
                pending = pending.lstrip(b"\0")  # zero padding after a member (tape blocks, preallocated files)
                if not pending:
                    break
                d = decompressobj(wbits=31)  # 31: gzip wrapper, CRC32 and length checked at the end
            out = d.decompress(pending, piece_bytes)
            if out:
                yield out
            if d.eof:
                pending, d = d.unused_data, None
            else:
                pending = d.unconsumed_tail
                while not pending and len(out) == piece_bytes and not d.eof:  # output left inside zlib
                    out = d.decompress(b"", piece_bytes)
                    if out:
                        yield out
                if d.eof:
                    pending, d = d.unused_data, None
    if d is not None:
        raise EOFError("truncated gzip (the last member does not end)")


def bounded(pieces: Iterator[bytes], path: str | Path, *, max_bytes: int | None = None) -> Iterator[bytes]:
    """``pieces`` unchanged, stopping with a TraceError past ``max_bytes`` (default :data:`MAX_TRACE_BYTES`) in
    all or a whitespace-only run past :data:`MAX_WHITESPACE_RUN` (counted in whole pieces)."""
    bounds = Bounds(path, max_bytes=max_bytes)
    for piece in pieces:
        bounds.add(piece)
        yield piece


class Bounds:
    """:func:`bounded`'s checks one piece at a time (:meth:`add`), for a reader whose pieces are not an iterator
    of bytes (``readahead.ReadAhead`` reads into buffers it reuses)."""

    def __init__(self, path: str | Path, *, max_bytes: int | None = None) -> None:
        self.path = path
        self.max_bytes = MAX_TRACE_BYTES if max_bytes is None else max_bytes
        self.total = self.blanks = 0

    def add(self, piece: bytes | bytearray | memoryview) -> None:
        """Count ``piece`` (not empty); TraceError past a bound."""
        self.total += len(piece)
        if self.total > self.max_bytes:
            raise TraceError(f"decompresses to more than {self.max_bytes >> 20} MB; phaseprof reads at most that "
                             f"(a gzip bomb, or profile fewer steps)", path=self.path)
        if piece[0] not in _WS_BYTES or piece[-1] not in _WS_BYTES or bytes(piece).strip(_WS):  # ends first: cheap
            self.blanks = 0
        else:
            self.blanks += len(piece)
            if self.blanks > MAX_WHITESPACE_RUN:
                raise TraceError(f"more than {MAX_WHITESPACE_RUN >> 20} MB of nothing but whitespace: not a "
                                 f"profiler trace (a gzip bomb?)", path=self.path)


#: Events phaseprof keeps (kernels, memcpys, runtime calls, CPU ops, allocator events) at most, checked while
#: reading: what a real trace of MAX_TRACE_BYTES keeps, with margin. The densest real trace here, the H200 eager
#: decode (traces/h200/eager: ~4,200 kept events per decode step), keeps one event per 286 decompressed bytes, so
#: 7.3 M in 2 GB; a graph-mode decode one per 450 bytes. The tables of 8 M events take ~0.6 GB while reading.
MAX_KEPT_EVENTS = 8_000_000
#: Steps one analysis takes at most (in the ``--steps`` window, when given): its memory and time grow with them,
#: ~10 KB and ~0.12 s a step (100,000 marker steps measured: 1.0 GB peak, 8.4 s; 250,000: 2.4 GB, 30-42 s, on
#: two shared cores), so past this a trace is refused in one line instead (a million steps took ~9 GB, ~92 s).
#: A trace of 200,000 marker steps (the hostile-input tests' largest) still runs.
MAX_STEPS = 200_000
#: Beyond this many kept events a trace must bring at least MIN_BYTES_PER_KEPT_EVENT decompressed bytes per kept
#: event (real traces bring 286 or more): the analysis takes ~250-400 bytes per kept event, so its memory stays in
#: proportion to the trace's size, and a bomb of tiny kept events (50 bytes each) stops before the analysis.
DENSE_KEPT_EVENTS = 1_750_000
MIN_BYTES_PER_KEPT_EVENT = 200
#: Longest time a trace may span and an event may last (µs): a profiler trace covers seconds to minutes. Past
#: this, a ``ts`` or ``dur`` is an overflowed or corrupted number, not a time (2^62 µs would be 146,000 years).
MAX_SPAN_US = 7 * 86_400 * 1e6
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


class TraceValueError(ValueError):
    """A value phaseprof cannot use as a number (beyond int64, out of range); the loader adds the file name."""


def int64_or_error(value: object, *, what: str) -> None:
    """Raise TraceValueError unless ``value`` (an int or float from the trace) fits int64."""
    try:
        ok = _INT64_MIN <= value <= _INT64_MAX  # type: ignore[operator]
    except TypeError:
        ok = False
    if not ok:
        text = f"{value:.6g}" if isinstance(value, float) else \
            str(value) if not isinstance(value, int) or value.bit_length() < 128 else f"2^{value.bit_length() - 1}+"
        raise TraceValueError(f"{what} value {text[:40]} is beyond the 64-bit integer range")


#: Deepest nesting of a trace's top-level metadata (deviceProperties, distributedInfo, ...): real ones are 2-3 deep.
MAX_METADATA_DEPTH = 32


def check_metadata(value: object, *, what: str, _depth: int = 0) -> None:
    """Raise TraceValueError unless every number in ``value`` (a top-level key of a trace: ``deviceProperties``,
    ``distributedInfo``, ...) is an int64 or a finite float, nested at most :data:`MAX_METADATA_DEPTH` deep. The
    metadata is copied into the breakdown, whose JSON writer stops at the first integer past 64 bits
    (``numSms: 2**70``) and whose readers do arithmetic on them."""
    if _depth > MAX_METADATA_DEPTH:
        raise TraceValueError(f"{what} is nested more than {MAX_METADATA_DEPTH} levels deep")
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return
    if isinstance(value, int):
        int64_or_error(value, what=what)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise TraceValueError(f"{what} value {value} is not a finite number")
    elif isinstance(value, dict):
        for k, v in value.items():
            check_metadata(v, what=f"{what}.{str(k)[:40]}", _depth=_depth + 1)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            check_metadata(v, what=f"{what}[{i}]", _depth=_depth + 1)


def check_times(ts_us: "np.ndarray", dur_us: "np.ndarray", origin_us: float, *, what: str) -> None:
    """Raise TraceValueError unless every event starts within :data:`MAX_SPAN_US` of ``origin_us`` and lasts
    between 0 and :data:`MAX_SPAN_US` (finite numbers only)."""
    import numpy as np

    rel = ts_us - origin_us
    bad_ts = ~np.isfinite(rel) | (rel > MAX_SPAN_US) | (rel < 0)
    if bad_ts.any():
        i = int(np.argmax(bad_ts))
        raise TraceValueError(f"{what} timestamp ts={ts_us[i]:.6g} µs lies {rel[i]:.3g} µs from the trace's first "
                              f"event (a trace spans at most {MAX_SPAN_US / 86_400e6:.0f} days): a corrupt number")
    bad_dur = ~np.isfinite(dur_us) | (dur_us < 0) | (dur_us > MAX_SPAN_US)
    if bad_dur.any():
        i = int(np.argmax(bad_dur))
        raise TraceValueError(f"{int(bad_dur.sum())} {what} event(s) with a duration outside 0..{MAX_SPAN_US:.3g} "
                              f"µs, first: dur={dur_us[i]:.6g}")
