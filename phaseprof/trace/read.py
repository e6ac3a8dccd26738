"""One trace file into its event tables: ``load_tables``, the entry point of every analysis.

Picks the fastest way the file allows: two processes reading its halves (``trace.split_read``), else one
streamed pass (``trace.stream``), else the whole document decoded at once; each builds the same tables with
``trace.tables.TableBuilder``. (Apart from ``tables.py`` so that the split read, which builds on the table
builder, is not imported back by it.)
"""

from __future__ import annotations

from pathlib import Path

from phaseprof.errors import TraceError
from phaseprof.trace.limits import TraceValueError
from phaseprof.trace.load import decode_trace, read_trace_bytes
from phaseprof.trace.split_read import load_split, split_point
from phaseprof.trace.stream import stream_trace
from phaseprof.trace.native import builder_for
from phaseprof.trace.tables import EventTables, Keep, build_tables, gc_paused


def load_tables(path: str | Path, *, streaming: bool = True, keep: Keep | None = None,
                origin_us: float | None = None, native: bool | None = None) -> EventTables:
    """Read, decode and tabulate one trace file. Raises TraceError (one line, names the file) on bad input.

    Reads chunk by chunk (:func:`~phaseprof.trace.stream.stream_trace`); when the file is not in the shape that
    handles (or is bad input), decodes the whole document instead, which gives the same tables or the error.
    ``streaming=False`` goes straight to the whole-document path (tests compare the two). ``keep`` and
    ``origin_us``: keep only some events (``--steps``, :mod:`phaseprof.trace.select`), times from that origin.
    The chunks are scanned by the native scanner (:mod:`phaseprof.trace.native`) where it is built and ``keep``
    is None, else decoded by msgspec; ``native=False`` forces the pure-Python path (the reference in tests),
    ``native=True`` the scanner (raises NativeUnsupported where it gives up, instead of falling back).
    """
    from phaseprof.trace import native as scanner

    use_native = native if native is not None else (streaming and keep is None and scanner.available())
    try:
        if use_native:
            try:
                return _load_tables(path, streaming=True, keep=None, origin_us=origin_us, native=True)
            except scanner.NativeUnsupported:
                if native:
                    raise
        return _load_tables(path, streaming=streaming, keep=keep, origin_us=origin_us)
    except TraceValueError as e:
        raise TraceError(str(e), path=path) from None


def _load_tables(path: str | Path, *, streaming: bool, keep: Keep | None, origin_us: float | None,
                 native: bool = False) -> EventTables:
    with gc_paused():
        if streaming and keep is None and (at := split_point(path)) is not None:
            tables = load_split(path, at, origin_us, native=native)
            if tables is not None:
                return tables
        if streaming:
            builder = builder_for(keep, native)
            streamed = stream_trace(path, builder.add, chunks=builder.add_json if native else None)
            if streamed is not None:
                return builder.finish(streamed.doc, path=str(path), sha256=streamed.sha256,
                                      decompressed_bytes=streamed.decompressed_bytes, origin_us=origin_us)
            del builder
        data, sha = read_trace_bytes(path)
        doc = decode_trace(data, path)
        size = len(data)
        del data
        return build_tables(doc, path=str(path), sha256=sha, decompressed_bytes=size, keep=keep,
                            origin_us=origin_us)

