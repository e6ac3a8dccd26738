"""One trace file into its event tables: ``load_tables``, the entry point of every analysis.

Two readers make the tables, chosen by one option (:class:`Reader`, ``phaseprof analyze --reader``): the native
scanner (``trace.native``, shipped in the wheel) and the pure-Python reader (msgspec), the reference that tests
compare the scanner with. The tables say which one made them and why (``EventTables.read_by``).

Within a reader it picks the fastest way the file allows: for a big trace, the native scanner with the file
inflated on a thread beside it (``trace.readahead``), or, decoding in Python, two processes reading its halves
(``trace.split_read``); else one streamed pass (``trace.stream``), else the whole document decoded at once; each
builds the same tables with ``trace.tables.TableBuilder``. (Apart from ``tables.py`` so that the split read,
which builds on the table builder, is not imported back by it.)
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from phaseprof.errors import EnvironmentProblem, PhaseprofError, TraceError
from phaseprof.lean_process import SPLIT_ENV
from phaseprof.trace.limits import TraceValueError
from phaseprof.trace.load import decode_trace, read_trace_bytes
from phaseprof.trace.readahead import ReadAhead
from phaseprof.trace.split_read import load_split, split_point
from phaseprof.trace.stream import stream_trace
from phaseprof.trace.native import builder_for
from phaseprof.trace.readers import ReadBy, Reader
from phaseprof.trace.tables import EventTables, Keep, build_tables, gc_paused


class _Meanwhile:
    """Work run on a thread while this process reads a trace (``load_tables(meanwhile=...)``): the analysis'
    imports, 1.2 s of the ``phaseprof analyze`` process, overlap the read, which spends its time in code that
    releases the GIL (the native scanner, inflating, hashing). :meth:`join` re-raises the work's exception."""

    #: While both run: the importing thread hands the GIL back to the reader within this many seconds when the
    #: reader's native call returns. Python's default, 5 ms, is about one 1 MB chunk's scan, which could leave the
    #: reader waiting as long as it scans (reasoned, not measured apart: the shared VM's load hid the difference).
    SWITCH_S = 0.0005

    def __init__(self, work: Callable[[], object] | None) -> None:
        self._work = work
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._switch = sys.getswitchinterval()

    def _run(self) -> None:
        try:
            self._work()  # type: ignore[misc]
        except BaseException as e:  # noqa: BLE001 - handed to the reading thread by join()
            self._error = e

    def start(self) -> None:
        """Start the work (once; after any fork of the split read: forking a threaded process risks its locks)."""
        if self._work is not None and self._thread is None:
            sys.setswitchinterval(self.SWITCH_S)
            self._thread = threading.Thread(target=self._run, name="phaseprof-meanwhile", daemon=True)
            self._thread.start()

    def join(self) -> None:
        """Wait for the work (run here if it never started); raise what it raised."""
        if self._work is None:
            return
        if self._thread is None:
            self._run()
        else:
            self._thread.join()
            sys.setswitchinterval(self._switch)
        self._work = None
        if self._error is not None:
            error, self._error = self._error, None
            raise error


def load_tables(path: str | Path, *, streaming: bool = True, keep: Keep | None = None,
                origin_us: float | None = None, reader: Reader = Reader.AUTO,
                meanwhile: Callable[[], object] | None = None, ahead: ReadAhead | None = None) -> EventTables:
    """Read, decode and tabulate one trace file. Raises TraceError (one line, names the file) on bad input.

    Reads chunk by chunk (:func:`~phaseprof.trace.stream.stream_trace`); when the file is not in the shape that
    handles (or is bad input), decodes the whole document instead, which gives the same tables or the error.
    ``streaming=False`` goes straight to the whole-document path (tests compare the two). ``keep`` and
    ``origin_us``: keep only some events (``--steps``, :mod:`phaseprof.trace.select`), times from that origin.
    ``reader`` (:class:`Reader`): ``AUTO`` scans the chunks with the native scanner (:mod:`phaseprof.trace.native`)
    where it is installed and ``keep`` is None, else decodes them with msgspec, and falls back to msgspec where
    the scanner gives up on the trace; ``PYTHON`` always decodes with msgspec (the reference); ``NATIVE`` always
    scans, and raises instead of falling back: EnvironmentProblem where the scanner is not installed, PhaseprofError
    with ``keep``, NativeUnsupported where it gives up on the trace. The tables' ``read_by`` says which read them.

    ``meanwhile``: work (imports, say) run on a thread while the native scanner reads, else before the read; done
    before the tables are built, and its exception raised in preference to the read's own.

    ``ahead``: ``path`` already being read and inflated on a thread (``trace.readahead``): its pieces feed the
    first chunked read, in this process (no split read: the thread inflates the file once while this one scans;
    a fork would copy a process with a thread mid-read); a fallback reads the file again.
    """
    tables = _read_tables(path, streaming=streaming, keep=keep, origin_us=origin_us, reader=Reader(reader),
                          meanwhile=meanwhile, ahead=ahead)
    release_free_heap()
    return tables


def release_free_heap() -> None:
    """Hand the C heap's free pages back to the system (glibc's ``malloc_trim``; elsewhere nothing happens).

    Why: reading leaves ~15 MB of freed memory in the heap on a 115 MB trace (the scanner's column buffers, the
    decompressed pieces) that the analysis does not reuse (its arrays come from fresh pages), so the analysis
    stacked its own peak on top of it: RSS after the tables 109 -> 95 MB measured. Costs ~1 ms."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
        pass


def _native_or_why(reader: Reader, *, streaming: bool, keep: Keep | None) -> str | None:
    """None where ``reader`` reads this with the native scanner; else why the pure-Python reader does (one line).
    Raises where ``Reader.NATIVE`` cannot be honoured."""
    from phaseprof.trace import native as scanner

    if reader == Reader.PYTHON:
        return "--reader python"
    if keep is not None:
        if reader == Reader.NATIVE:
            raise PhaseprofError("--reader native reads whole traces: --steps reads only its steps' events, with "
                                 "the pure-Python reader (--reader python or auto)")
        return "--steps reads only the events of those steps (the native scanner reads whole traces)"
    found = scanner.status()
    if not found.loaded:
        if reader == Reader.NATIVE:
            raise EnvironmentProblem(f"--reader native: {found.problem}")
        return found.problem
    if not streaming and reader == Reader.AUTO:
        return "whole-document read asked for (streaming=False)"
    return None


def _read_tables(path: str | Path, *, streaming: bool, keep: Keep | None, origin_us: float | None,
                 reader: Reader, meanwhile: Callable[[], object] | None, ahead: ReadAhead | None
                 ) -> EventTables:
    from phaseprof.trace import native as scanner

    why_python = _native_or_why(reader, streaming=streaming, keep=keep)
    other = _Meanwhile(meanwhile)
    if ahead is not None and not (streaming and keep is None):
        ahead.close()  # the whole-document or --steps read opens the file itself
        ahead = None
    try:
        if why_python is not None:
            other.join()  # the pure-Python read holds the GIL: nothing to overlap
        else:
            try:
                tables = _load_tables(path, streaming=True, keep=None, origin_us=origin_us, native=True,
                                      meanwhile=other, ahead=ahead)
                found = scanner.status()
                return replace(tables, read_by=ReadBy("native", f"{found.path}, ABI {scanner.ABI_VERSION}"))
            except scanner.NativeUnsupported as e:
                if reader == Reader.NATIVE:
                    raise scanner.NativeUnsupported(f"{e} (--reader native; --reader auto or python reads it)",
                                                    path=path) from None
                why_python = f"the native scanner gave up on this trace ({e}), so it was read again"
        tables = _load_tables(path, streaming=streaming, keep=keep, origin_us=origin_us, meanwhile=other,
                              ahead=ahead if ahead is not None and not ahead.taken() else None)
        return replace(tables, read_by=ReadBy("python", why_python))
    except TraceValueError as e:
        raise TraceError(str(e), path=path) from None
    finally:
        if ahead is not None:
            ahead.close()
        other.join()


def _load_tables(path: str | Path, *, streaming: bool, keep: Keep | None, origin_us: float | None,
                 native: bool = False, meanwhile: _Meanwhile | None = None,
                 ahead: ReadAhead | None = None) -> EventTables:
    other = meanwhile or _Meanwhile(None)
    own_ahead = None
    with gc_paused():
        if ahead is None and streaming and keep is None and (at := split_point(path)) is not None:
            if native and os.environ.get(SPLIT_ENV) != "1":
                # The native scanner reads a big trace faster with one inflate on a thread beside it than as two
                # processes (2.1 GB: 3.1-4.0 s against 4.8-5.6 s on the 2-core VM, 3.1-3.4 against 3.8-4.3 on the
                # Xeon; 117 MB: 0.83-1.10 against 1.00-1.04): the split read stays for the pure-Python decoder,
                # which holds the GIL, and where PHASEPROF_SPLIT_READ=1 asks for it (tests).
                ahead = own_ahead = ReadAhead(path)
            else:
                tables = load_split(path, at, origin_us, native=native, forked=other.start,
                                    before_tables=other.join)
                if tables is not None:
                    return tables
        try:
            return _read_streamed(path, streaming=streaming, keep=keep, origin_us=origin_us, native=native,
                                  other=other, ahead=ahead)
        finally:
            if own_ahead is not None:
                own_ahead.close()


def _read_streamed(path: str | Path, *, streaming: bool, keep: Keep | None, origin_us: float | None, native: bool,
                   other: _Meanwhile, ahead: ReadAhead | None) -> EventTables:
    """:func:`_load_tables` in this process: streamed in chunks, else the whole document."""
    other.start()
    if streaming:
        builder = builder_for(keep, native)
        streamed = stream_trace(path, builder.add, chunks=builder.add_json if native else None, ahead=ahead)
        if streamed is not None:
            other.join()
            # The pieces' freed heap goes back before the tables are made, not after: the finish's transient
            # no longer stacks on it (VmHWM of the read at 117 MB: 115 -> 109 MB, means of 6 rounds).
            release_free_heap()
            return builder.finish(streamed.doc, path=str(path), sha256=streamed.sha256,
                                  decompressed_bytes=streamed.decompressed_bytes, origin_us=origin_us)
        del builder
    data, sha = read_trace_bytes(path)
    doc = decode_trace(data, path)
    size = len(data)
    del data
    other.join()
    return build_tables(doc, path=str(path), sha256=sha, decompressed_bytes=size, keep=keep,
                        origin_us=origin_us)

