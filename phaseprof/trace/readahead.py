"""A trace's decompressed bytes in pieces, read and inflated on a thread of their own (``ReadAhead``) or in the
caller's (:func:`stored_pieces`).

Why a thread: ISA-L's inflate and sha256 release the GIL, so one thread inflating while another scans
(``trace.stream`` feeding the native scanner, which releases it too) uses two cores with one inflate of the file,
where the split read's two processes inflate the first half twice and send the second half's columns through a
pipe. And ``phaseprof analyze`` starts it before it imports numpy, msgspec and the scanner (0.3 s of CPU), so the
read begins ~0.1 s after the process does. This module imports nothing heavier than ``trace.limits``.

A :class:`ReadAhead` gives its pieces once (``pieces()``); a second reader of the same file (the pure-Python
fallback) opens it again with :func:`stored_pieces`. Whatever the reading raises (a limit's TraceError, a corrupt
gzip, an unreadable file) is raised by ``pieces()`` where the piece would have come, as the caller's own read
would have raised it.
"""

from __future__ import annotations

import hashlib
import queue
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from phaseprof.trace.limits import GZIP_MAGIC, bounded, inflate, open_trace

#: Decompressed bytes per piece, about one decode chunk. Measured on a 55 MB trace: 1 MB chunks decode ~20 %
#: faster than the whole document at once (they stay in cache); 8-16 MB chunks are slower than the whole.
PIECE_BYTES = 1 << 20
READ_BYTES = 1 << 18  # compressed bytes per read(): ~4 MB decompressed for a typical 16x Kineto trace


class EmptyTrace(Exception):
    """The file holds no bytes."""


class Source:
    """The digest of the stored bytes and the decompressed size so far (the total once the pieces end)."""

    def __init__(self) -> None:
        self.digest = hashlib.sha256()
        self.size = 0


def stored_pieces(path: Path, source: Source, piece_bytes: int = PIECE_BYTES) -> Iterator[bytes]:
    """The file's decompressed bytes in pieces of at most ``piece_bytes``; hashes the stored bytes into
    ``source.digest`` and counts ``source.size`` on the way. EmptyTrace for an empty file."""
    with open_trace(path) as f:
        first = f.read(min(READ_BYTES, piece_bytes))
        if not first:
            raise EmptyTrace("empty file")
        source.digest.update(first)
        gz = first[:2] == GZIP_MAGIC
        blocks = _blocks(first, f, source, READ_BYTES if gz else piece_bytes)
        for piece in bounded(inflate(blocks, piece_bytes) if gz else blocks, path):
            source.size += len(piece)
            yield piece


def _blocks(first: bytes, f: BinaryIO, source: Source, size: int) -> Iterator[bytes]:
    """The stored bytes in blocks, ``first`` (already hashed) included; hashes the rest as it reads them."""
    yield first
    while block := f.read(size):
        source.digest.update(block)
        yield block


_END = object()


class ReadAhead(Source):
    """:func:`stored_pieces` of ``path`` produced on a thread started now, at most :data:`DEPTH` pieces ahead of
    the reader of :meth:`pieces`."""

    #: Pieces (~1 MB each) waiting at most: enough to ride out the reader's pauses, little memory.
    DEPTH = 8

    def __init__(self, path: str | Path, piece_bytes: int = PIECE_BYTES) -> None:
        super().__init__()
        self.path, self.piece_bytes = Path(path), piece_bytes
        self._queue: queue.Queue[Any] = queue.Queue(self.DEPTH)
        self._stop = threading.Event()
        self._taken = False
        self._thread = threading.Thread(target=self._run, name="phaseprof-readahead", daemon=True)
        self._thread.start()

    def _put(self, item: object) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        try:
            for piece in stored_pieces(self.path, self, self.piece_bytes):
                if not self._put(piece):
                    return
            self._put(_END)
        except BaseException as e:  # noqa: BLE001 - raised by pieces() in the reading thread
            self._put(e)

    def taken(self) -> bool:
        """Whether :meth:`pieces` was called (it can be, once)."""
        return self._taken

    def pieces(self) -> Iterator[bytes]:
        """The pieces, in order; raises what the reading raised. Closing it early stops the thread."""
        if self._taken:
            raise RuntimeError("a ReadAhead's pieces are read once")
        self._taken = True
        return self._drain()

    def _drain(self) -> Iterator[bytes]:
        try:
            while (item := self._queue.get()) is not _END:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            self.close()

    def close(self) -> None:
        """Stop the thread (it ends within one piece) and drop what it queued."""
        self._stop.set()
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        self._thread.join()
