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
import io
import queue
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from phaseprof.errors import TraceError
from phaseprof.trace.limits import GZIP_MAGIC, Bounds, bounded, inflate, open_trace

#: Decompressed bytes per piece, about one decode chunk. Measured on a 55 MB trace: 1 MB chunks decode ~20 %
#: faster than the whole document at once (they stay in cache); 8-16 MB chunks are slower than the whole.
PIECE_BYTES = 1 << 20
READ_BYTES = 1 << 18  # compressed bytes per read(): ~4 MB decompressed for a typical 16x Kineto trace


#: Free bytes before a :class:`Slot`'s piece: the stream reader puts the bytes it carries from the last piece there
#: instead of copying the piece after them. It cuts at the first event boundary in a piece's last 4 KB
#: (``stream._cut``), so it carries ~4 KB; where it finds none there, 32 KB or more (then the piece is copied).
SLOT_ROOM = 1 << 16
#: Free bytes after a slot's piece: what the native scanner borrows past a chunk it scans in place (64), and more.
SLOT_PAD = 1 << 8


class EmptyTrace(Exception):
    """The file holds no bytes."""


class Slot:
    """A piece inflated straight into a buffer that :class:`ReadAhead` reuses: ``buf[start:end]``, with
    :data:`SLOT_ROOM` free bytes before it and :data:`SLOT_PAD` after. The reader gives it back with
    :meth:`release` once it no longer needs its bytes (a buffer not given back is not reused: a new one is made)."""

    __slots__ = ("buf", "start", "end", "_free")

    def __init__(self, buf: bytearray, start: int, end: int, free: queue.Queue[bytearray] | None) -> None:
        self.buf, self.start, self.end, self._free = buf, start, end, free

    def __len__(self) -> int:
        return self.end - self.start

    def view(self) -> memoryview:
        """The piece's bytes (release the view before :meth:`release`)."""
        return memoryview(self.buf)[self.start:self.end]

    def release(self) -> None:
        """Give the buffer back for the next piece; once."""
        free, self._free = self._free, None
        if free is not None:
            free.put(self.buf)


class _Hashed(io.RawIOBase):
    """A binary file whose bytes read through :meth:`readinto` are hashed into ``digest`` on the way."""

    def __init__(self, f: BinaryIO, digest: Any) -> None:
        super().__init__()
        self.f, self.digest = f, digest

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        n = self.f.readinto(b)
        if n:
            with memoryview(b) as view:
                self.digest.update(view[:n])
        return n or 0


def _gzip_reader() -> Any:
    """ISA-L's gzip reader that inflates into a caller's buffer (``isal_zlib._GzipReader``: every member, CRC and
    length checked, zero padding skipped, as ``gzip -dc``), or None without the ``isal`` package."""
    try:
        from isal import isal_zlib
    except ImportError:
        return None
    return getattr(isal_zlib, "_GzipReader", None)


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


class _Resume(Exception):
    """The fast read failed after queuing ``read`` bytes: the reference read takes over from there."""

    def __init__(self, read: int) -> None:
        super().__init__(read)
        self.read = read


class ReadAhead(Source):
    """:func:`stored_pieces` of ``path`` produced on a thread started now, at most :data:`DEPTH` pieces ahead of
    the reader of :meth:`pieces`."""

    #: Pieces (~1 MB each) waiting at most: enough to ride out the reader's pauses, little memory.
    DEPTH = 8

    def __init__(self, path: str | Path, piece_bytes: int = PIECE_BYTES) -> None:
        super().__init__()
        self.path, self.piece_bytes = Path(path), piece_bytes
        self._queue: queue.Queue[Any] = queue.Queue(self.DEPTH)
        self._free: queue.Queue[bytearray] = queue.Queue()  # slot buffers given back by the reader
        self._made = 0
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
            try:
                done, read = self._read_into_slots()
            except _Resume as e:  # the reference read resumes at the same byte and gives its own outcome
                if isinstance(e.__cause__, TraceError):
                    raise e.__cause__ from None
                done, read = False, e.read
            if done is None:  # stopped by close()
                return
            if not done and not self._read_pieces(skip=read):
                return
            self._put(_END)
        except BaseException as e:  # noqa: BLE001 - raised by pieces() in the reading thread
            self._put(e)

    def _read_into_slots(self) -> tuple[bool | None, int]:
        """The file inflated (or read) straight into reused buffers, queued as :class:`Slot` pieces: no piece is
        allocated and none is copied again by the stream reader (2.1 GB: the inflate 1.8 -> 1.1 CPU-s, and 0.4
        CPU-s of copies gone from the scanning thread). ``(True, n)`` when read to the end, ``(None,
        n)`` when stopped, ``(False, 0)`` where this reader does not apply (no ``isal``, standard input); ``n``:
        the decompressed bytes queued. Whatever it raises but a bound's TraceError, the reference read
        (:meth:`_read_pieces`) takes over from the same byte, so every outcome (an error's wording too) is
        :func:`stored_pieces`'."""
        reader_of = _gzip_reader()
        if reader_of is None:
            return False, 0
        read = 0
        with open_trace(self.path) as f:  # its errors are the reference read's: it opens the file the same way
            if not hasattr(f, "peek"):
                return False, 0
            try:
                head = f.peek(2)[:2]
                if not head:
                    raise EmptyTrace("empty file")
                hashed = _Hashed(f, self.digest)
                reader = reader_of(hashed, READ_BYTES) if head == GZIP_MAGIC else hashed
                bounds = Bounds(self.path)
                while True:
                    buf = self._free_buffer()
                    with memoryview(buf) as whole, whole[SLOT_ROOM:SLOT_ROOM + self.piece_bytes] as into:
                        n = reader.readinto(into)
                    if not n:
                        self._free.put(buf)
                        return True, read
                    slot = Slot(buf, SLOT_ROOM, SLOT_ROOM + n, self._free)
                    with slot.view() as piece:
                        bounds.add(piece)
                    self.size += n
                    read += n
                    if not self._put(slot):
                        return None, read
            except EmptyTrace:
                raise
            except Exception as e:
                raise _Resume(read) from e

    def _free_buffer(self) -> bytearray:
        """A buffer for the next slot: one given back, else a new one. The queue's bound keeps them few (DEPTH
        queued, one or two with the reader); a slot the reader does not give back costs memory, never a wait."""
        try:
            return self._free.get_nowait()
        except queue.Empty:
            self._made += 1
            return bytearray(SLOT_ROOM + self.piece_bytes + SLOT_PAD)

    def _read_pieces(self, skip: int) -> bool:
        """:func:`stored_pieces` of the file from its start, queuing what follows its first ``skip`` bytes; the
        digest and size start over. False when stopped."""
        self.digest, self.size = hashlib.sha256(), 0
        for piece in stored_pieces(self.path, self, self.piece_bytes):
            if skip:
                if len(piece) <= skip:
                    skip -= len(piece)
                    continue
                piece, skip = piece[skip:], 0
            if not self._put(piece):
                return False
        return True

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
        """Stop the thread (it ends within one piece) and drop what it queued, and the buffers given back: ~10 MB
        that would otherwise live on through the tables' making, the read's peak."""
        self._stop.set()
        for q in (self._queue, self._free):
            while True:
                try:
                    q.get_nowait()
                except queue.Empty:
                    break
        self._thread.join()
        while True:  # what the thread gave back as it ended
            try:
                self._free.get_nowait()
            except queue.Empty:
                break
