"""What a trace was recorded with, read from the trace itself: Python stacks (``with_stack``), input shapes
(``record_shapes``), allocator events (``profile_memory``), FLOP counts (``with_flops``), and when each Python
frame the stack recorder wrote began.

The table loader keeps only the ``nn.Module: …`` frames of the Python stack (two thirds of a vLLM trace recorded
``with_stack`` are frames phaseprof never reads, ``trace.stream``), so this is a pass of its own over the file's
bytes: a regular expression over each inflated piece, no JSON decode, one ``ts`` and ``Python id`` per
``python_function`` event (Kineto writes ``ph, cat, name, pid, tid, ts, dur, args`` in that order; the cut
fixtures keep it). Why the ids: a trace cut down to its module frames (the committed vLLM traces,
``traces/h200/*/README.md``) still numbers its frames as recorded — the Python tracer numbers every frame it
writes, in order — so the span of ids over a window counts the frames recorded there, dropped ones too.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from phaseprof.trace.limits import GZIP_MAGIC, open_trace

#: Inflated bytes scanned at a time (a Python frame's event is under a few KB: the carry-over between pieces).
_PIECE = 1 << 24
_CARRY = 1 << 16
_NUM = rb"(-?[0-9][0-9.eE+-]*)"
_PYTHON = re.compile(rb'"cat":\s*"python_function",\s*"name":\s*"(?:[^"\\]|\\.)*",\s*"pid":\s*[^,]*,\s*'
                     rb'"tid":\s*[^,]*,\s*"ts":\s*' + _NUM + rb'(?:,\s*"dur":\s*[^,]*)?,\s*"args":\s*\{'
                     rb'[^{}]*?"Python id":\s*([0-9]+)')
_PYTHON_ANY = re.compile(rb'"cat":\s*"python_function"')
_SHAPES = re.compile(rb'"Input Dims":')
_MEMORY = re.compile(rb'"name":\s*"\[memory\]"')
_FLOPS = re.compile(rb'"flops":')


@dataclass(frozen=True)
class Recording:
    """The profiler's settings as the trace shows them. ``python_events``: ``python_function`` events in the
    file; ``python_ts_us`` / ``python_ids``: each one's start (the file's clock, µs) and ``Python id``, sorted by
    start (events whose layout the pattern does not read are counted, not placed)."""

    with_stack: bool
    record_shapes: bool
    profile_memory: bool
    with_flops: bool
    python_events: int
    python_ts_us: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False, compare=False)
    python_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64), repr=False, compare=False)

    def settings(self) -> dict[str, bool]:
        return {"with_stack": self.with_stack, "record_shapes": self.record_shapes,
                "profile_memory": self.profile_memory, "with_flops": self.with_flops}

    def python_frames_in(self, start_us: float, end_us: float) -> int:
        """Python frames the stack recorder wrote in ``[start_us, end_us)`` (file clock): the span of their ids
        where it is the larger (a trace cut down to its module frames), else those present."""
        lo, hi = np.searchsorted(self.python_ts_us, [start_us, end_us])
        if hi <= lo:
            return 0
        ids = self.python_ids[lo:hi]
        return int(max(hi - lo, int(ids.max()) - int(ids.min()) + 1))


def _pieces(path: str | Path):
    with open_trace(path) as f:
        head = f.read(2)
        inflater = zlib.decompressobj(wbits=47) if head == GZIP_MAGIC else None
        data = head
        while True:
            if inflater is not None:
                out = inflater.decompress(data, _PIECE) if data else inflater.decompress(inflater.unconsumed_tail,
                                                                                         _PIECE)
                if out:
                    yield out
                if inflater.unconsumed_tail:
                    data = b""
                    continue
                if inflater.eof and inflater.unused_data.strip(b"\0"):  # a further gzip member
                    rest = inflater.unused_data
                    inflater = zlib.decompressobj(wbits=47)
                    data = rest
                    continue
            elif data:
                yield data
            data = f.read(_PIECE)
            if not data:
                if inflater is not None:
                    tail = inflater.flush()
                    if tail:
                        yield tail
                return


def read_recording(path: str | Path) -> Recording:
    """One pass over the file (see the module docstring). Raises what reading the file raises (TraceError)."""
    scan = _Scan()
    carry = b""
    for piece in _pieces(path):
        buf = carry + piece
        # the events whole in this buffer: up to the opening brace of the last event (its "ph" key comes first
        # in Kineto's and the cut fixtures' layout); from there on it is carried into the next piece
        at = buf.rfind(b'"ph"')
        cut = buf.rfind(b"{", 0, at) if at > 0 else -1
        if cut < 0:  # no event starts here yet: carry it all, unless it grew past any one event's size
            cut = len(buf) if len(buf) > _CARRY else 0
        elif len(buf) - cut > _CARRY:
            cut = len(buf)
        scan.add(buf[:cut])
        carry = buf[cut:]
    scan.add(carry)
    t = np.concatenate(scan.ts) if scan.ts else np.zeros(0)
    i = np.concatenate(scan.ids) if scan.ids else np.zeros(0, dtype=np.int64)
    order = np.argsort(t, kind="stable")
    return Recording(with_stack=scan.total > 0, record_shapes=scan.shapes, profile_memory=scan.memory,
                     with_flops=scan.flops, python_events=scan.total, python_ts_us=t[order], python_ids=i[order])


class _Scan:
    """What :func:`read_recording` gathers, one run of whole events at a time."""

    def __init__(self) -> None:
        self.ts: list[np.ndarray] = []
        self.ids: list[np.ndarray] = []
        self.total, self.shapes, self.memory, self.flops = 0, False, False, False

    def add(self, body: bytes) -> None:
        """Literal searches first (memchr speed): the frame pattern runs only where a frame is; a setting found
        is not searched for again."""
        if not body:
            return
        if b'"python_function"' in body:
            self.total += len(_PYTHON_ANY.findall(body))
            found = _PYTHON.findall(body)
            if found:
                self.ts.append(np.asarray([float(t) for t, _ in found]))
                self.ids.append(np.asarray([int(i) for _, i in found], dtype=np.int64))
        self.shapes = self.shapes or (b'"Input Dims"' in body and _SHAPES.search(body) is not None)
        self.memory = self.memory or (b"[memory]" in body and _MEMORY.search(body) is not None)
        self.flops = self.flops or (b'"flops"' in body and _FLOPS.search(body) is not None)
