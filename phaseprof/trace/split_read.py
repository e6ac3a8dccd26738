"""One big trace read by two processes at once (``load_tables`` uses it for traces of ``SPLIT_MIN_BYTES`` and
more that the pure-Python decoder reads, or wherever ``PHASEPROF_SPLIT_READ=1``; the native scanner reads them
with a thread inflating ahead instead, which is faster): this process decodes the first half of the events, a
forked child the second
(:func:`~phaseprof.trace.stream.stream_half`), and the child's columns come back through a pipe, out of band, to
be appended to this process's. Any doubt (no separator at the split, a half that fails or hits a limit, a child
that dies) returns None and the caller reads the file in one process, which gives the same tables or the same
error (``tests/trace/test_split_read.py``)."""

from __future__ import annotations

import os
import pickle
import signal
import stat
import struct
import sys
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from phaseprof.lean_process import SPLIT_ENV
from phaseprof.trace.stream import merged_halves, stream_half
from phaseprof.trace.native import builder_for
from phaseprof.trace.tables import EventTables, TableBuilder

#: Traces that decompress to at least this many bytes (gzip's recorded size, else the file's) are read by two
#: processes at once on Linux with 2+ CPUs: this one decodes the first half of the events, a forked child the
#: second (:func:`~phaseprof.trace.stream.stream_half`), and the child's columns are appended to this one's.
#: Decoding and tabulating are ~70 % of a single-trace analysis; split, a 154 MB trace loads in ~0.55x the time.
SPLIT_MIN_BYTES = 48 << 20
#: Where the split falls: the child also inflates (and drops) the first half and sends its columns through a pipe,
#: so this process takes a little more than half of the events (measured on 154 MB: both end within ~20 ms).
SPLIT_FRACTION = 0.53


def split_point(path: str | Path) -> int | None:
    """Decompressed byte offset to split ``path``'s read at (about half), or None to read it in one process."""
    mode = os.environ.get(SPLIT_ENV, "")
    if mode == "0" or str(path) == "-" or not hasattr(os, "fork") or not sys.platform.startswith("linux"):
        return None
    if mode != "1" and len(os.sched_getaffinity(0)) < 2:
        return None
    if threading.active_count() > 1:  # forking a threaded program (the dashboard's server) risks the child's locks
        return None
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                return None
            size = st.st_size
            if f.read(2) == b"\x1f\x8b" and size >= 20:
                f.seek(-4, os.SEEK_END)
                size = int.from_bytes(f.read(4), "little")  # ISIZE: the last member's size mod 2^32
    except OSError:
        return None
    if mode != "1" and size < SPLIT_MIN_BYTES:
        return None
    return int(size * SPLIT_FRACTION)


#: The child's exit status when the native scanner gave up on its half: the whole read goes pure-Python.
_UNSUPPORTED_STATUS = 3


def load_split(path: str | Path, at: int, origin_us: float | None, *, native: bool = False,
               forked: Callable[[], None] = lambda: None,
               before_tables: Callable[[], None] = lambda: None) -> EventTables | None:
    """The tables of ``path``, its events read by two processes split at decompressed byte ``at``; None (the
    caller reads it in one process, which gives the same tables or the same error) when anything is off: no
    separator there, a false one, a half that fails or hits a limit, duplicate top-level keys. ``native``: both
    halves scanned by the native scanner; NativeUnsupported when either gives up on its half. ``forked``: called
    in this process once the child is forked (threads may start from then on); ``before_tables``: before the
    tables are built from the halves' columns."""
    from phaseprof.trace.native import NativeUnsupported

    r, w = os.pipe()
    with warnings.catch_warnings():  # Python >= 3.12 warns on fork with native threads (BLAS pools): the child
        warnings.simplefilter("ignore", DeprecationWarning)  # runs only this module's code, then os._exit
        pid = os.fork()
    if pid == 0:  # the child: the second half, pickled to the pipe; never returns into the caller's code
        status = 1
        try:
            os.close(r)
            try:
                payload = _second_half(path, at, native)
            except NativeUnsupported:
                status = _UNSUPPORTED_STATUS
                raise
            if payload is not None:
                with os.fdopen(w, "wb") as f:
                    _send(f, payload)
                status = 0
        except BaseException:  # noqa: BLE001 - reported as the exit status; the parent reads in one process
            pass
        finally:
            os._exit(status)
    os.close(w)
    done = False
    try:
        forked()
        builder = builder_for(None, native)
        try:
            first = stream_half(path, builder.add, at, second=False, chunks=builder.add_json if native else None)
        except NativeUnsupported:
            raise
        except Exception:  # a limit or a bad value: the one-process read raises the error it would raise
            first = None
        if first is None:
            return None
        with os.fdopen(r, "rb") as f:
            r = -1
            try:
                second = _receive(f)
            except Exception:  # a child that died mid-write or wrote something else: read in one process
                second = None
        _, status = os.waitpid(pid, 0)
        done = True
        if os.waitstatus_to_exitcode(status) == _UNSUPPORTED_STATUS:
            raise NativeUnsupported("the native scanner gave up on the second half")
        if status != 0 or second is None:
            return None
        doc = merged_halves(first, second["half"])
        if doc is None or not builder.absorb(second):
            return None
        half = second["half"]
        before_tables()
        return builder.finish(doc, path=str(path), sha256=half.sha256, decompressed_bytes=half.decompressed_bytes,
                              origin_us=origin_us)
    finally:
        if r >= 0:
            os.close(r)
        if not done:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
            os.waitpid(pid, 0)


_LEN = struct.Struct("<Q")


def _send(f: BinaryIO, payload: dict[str, Any]) -> None:
    """Pickle ``payload`` to ``f`` with its arrays' bytes out of band (pickle protocol 5): the header, then each
    buffer as it lies in memory, each after its length; no pickled copy of the columns is ever made."""
    buffers: list[pickle.PickleBuffer] = []
    header = pickle.dumps(payload, protocol=5, buffer_callback=buffers.append)
    f.write(_LEN.pack(len(buffers)) + _LEN.pack(len(header)))
    f.write(header)
    for b in buffers:
        raw = b.raw()
        f.write(_LEN.pack(raw.nbytes))
        f.write(raw)


def _receive(f: BinaryIO) -> dict[str, Any] | None:
    """What :func:`_send` wrote, the arrays built on buffers read straight from ``f``; None if it ends early."""
    def exactly(n: int) -> bytearray | None:
        buf = bytearray(n)
        view, got = memoryview(buf), 0
        while got < n:
            k = f.readinto(view[got:])
            if not k:
                return None
            got += k
        return buf

    head = exactly(2 * _LEN.size)
    if head is None:
        return None
    count, size = _LEN.unpack_from(head, 0)[0], _LEN.unpack_from(head, _LEN.size)[0]
    header = exactly(size)
    buffers = []
    for _ in range(count):
        n = exactly(_LEN.size)
        b = exactly(_LEN.unpack(n)[0]) if n is not None else None
        if header is None or b is None:
            return None
        buffers.append(b)
    return pickle.loads(header, buffers=buffers) if header is not None else None


def _second_half(path: str | Path, at: int, native: bool = False) -> dict[str, Any] | None:
    """In the child: the second half's stream facts and its builder's rows (``TableBuilder.exported``)."""
    builder = builder_for(None, native)
    half = stream_half(path, builder.add, at, second=True, chunks=builder.add_json if native else None)
    if half is None:
        return None
    return {"half": half, **builder.exported()}
