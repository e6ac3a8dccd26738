"""Chunked reader for Kineto traces: decompress in blocks, decode ``traceEvents`` a chunk at a time.

Why: decoding the whole document keeps the decompressed bytes *and* a struct for every event alive at once
(two thirds of a vLLM trace recorded ``with_stack`` are ``python_function`` events phaseprof never reads). Here
only one chunk of bytes (~1 MB) and its structs are alive at a time; the caller's ``sink`` keeps what it needs
and the rest is freed before the next chunk is decoded.

How: the document is read as ``header "traceEvents": [ events ] trailer``. The header (top-level keys before the
array) and trailer (keys after it, e.g. ``traceName``, ``baseTimeNanoseconds``) are decoded into one
:class:`TraceDoc`. The events are cut at separators ``}`` ws ``,`` ws ``{`` (a heuristic: one may also occur
inside a string or a nested list of objects) and each chunk is decoded strictly as ``[chunk]`` with the same
``list[Event]`` decoder the whole-document path uses. A chunk that does not decode is kept and retried merged
with the next one, so a cut at a false separator costs time, never correctness: a chunk that starts at a real
event boundary decodes only if it also ends at one. Anything else unexpected (no ``traceEvents`` key, a bare
top-level array, a header or trailer that does not parse, duplicate top-level keys, a type the strict decoder
rejects, a truncated gzip stream) makes :func:`stream_trace` return ``None``, and the caller falls back to
decoding the whole document, which gives the same result or the same error. Input that is past a bound of
:mod:`phaseprof.trace.limits` (size, whitespace, a special file) raises :class:`~phaseprof.errors.TraceError` here.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import msgspec

from phaseprof.trace import readahead
from phaseprof.trace.schema import Event, TraceDoc

#: Decompressed bytes per piece (``trace.readahead``, which reads and inflates them): about one decode chunk.
PIECE_BYTES = readahead.PIECE_BYTES
_WS = b" \t\n\r"  # JSON whitespace exactly: \f and \v are not, so no regex \s anywhere here
_WS_NUL = _WS + b"\0"
_WS_ENDS = frozenset(bytes([c]) for c in _WS)
_WS_INTS = frozenset(_WS)
_SEP = re.compile(rb"\}[ \t\n\r]*,[ \t\n\r]*\{")
_EVENTS_KEY = re.compile(rb'"traceEvents"[ \t\n\r]*:[ \t\n\r]*\[')
_SEP_WINDOW = 1 << 12  # look for the cut in the last 4 KB of the buffer first
_MAX_HEADER = 64 << 20  # no traceEvents key within this many bytes: let the whole-document path explain why
_MAX_CARRY = 32 << 20  # undecodable bytes carried forward beyond this: the document is broken, fall back
_MAX_TRAILER = 1 << 20  # keys after the event array beyond this size: unusual, fall back
_MAX_TAIL_DECODES = 8  # ']' candidates (from the end) whose trailer parses, tried as the array's end
_BOM = b"\xef\xbb\xbf"
_KEY_OVERLAP = 4096  # the events key is searched for in new bytes plus this many old ones (no rescans)

_EVENTS = msgspec.json.Decoder(list[Event])
_META = msgspec.json.Decoder(TraceDoc)
_KEYS = msgspec.json.Decoder(dict[str, msgspec.Raw])

#: Takes one chunk's bytes, ``[event, ...]``, keeps what it needs of them, returns how many events it held; raises
#: msgspec.DecodeError when the bytes are not a JSON array of events (a false cut: retried with more bytes),
#: msgspec.ValidationError when the strict types do not hold. Leaves no trace of a chunk it raised on.
Chunks = Callable[[bytes | bytearray | memoryview], int]


def _decoding(sink: Callable[[list[Event]], None]) -> Chunks:
    """The :data:`Chunks` of msgspec's ``list[Event]`` decode followed by ``sink`` (the pure-Python path)."""
    def decode(data: bytes | bytearray | memoryview) -> int:
        events = _EVENTS.decode(data)
        sink(events)
        return len(events)
    return decode


class _Inconsistent(Exception):
    """The input is not in the shape the chunked path handles; the whole-document path takes over."""


@dataclass(frozen=True)
class StreamedTrace:
    """What the chunked read learned besides the events it handed to the sink."""

    doc: TraceDoc  # header + trailer keys; ``traceEvents`` is None (the events went to the sink)
    sha256: str  # of the file as stored
    decompressed_bytes: int
    event_count: int  # every event in the array, kept or not


def stream_trace(path: str | Path, sink: Callable[[list[Event]], None] | None, *,
                 piece_bytes: int | None = None, chunks: Chunks | None = None,
                 ahead: readahead.ReadAhead | None = None) -> StreamedTrace | None:
    """Decode ``path``'s events chunk by chunk into ``sink`` (called in file order); ``None`` when the input
    needs the whole-document path. ``sink`` may have been called before ``None`` is returned: discard its state.
    ``piece_bytes`` (default :data:`PIECE_BYTES`) sets the chunk size; tests make it tiny to cut everywhere.
    ``chunks`` (instead of ``sink``) takes each chunk's bytes undecoded (the native scanner, ``trace/native.py``).
    ``ahead``: the file's pieces already being read on a thread (``trace.readahead``; ``piece_bytes`` is its own).
    """
    pieces = _Pieces(Path(path), piece_bytes or PIECE_BYTES, ahead)
    source = iter(pieces)
    try:
        doc, count = _read(source, chunks or _decoding(sink), pieces.piece_bytes)
    except (_Inconsistent, msgspec.DecodeError, zlib.error, EOFError, OSError, RecursionError):  # ValidationError is a DecodeError
        return None
    finally:
        source.close()  # closes the file now rather than when the generator is collected
    return StreamedTrace(doc=doc, sha256=pieces.source.digest.hexdigest(), decompressed_bytes=pieces.source.size,
                         event_count=count)


@dataclass(frozen=True)
class StreamedHalf:
    """One half of a split read (:func:`stream_half`)."""

    doc: TraceDoc  # the first half: the header's keys; the second: the trailer's
    keys: set[str]  # the top-level keys ``doc`` was decoded from
    sha256: str  # of the whole file as stored: the second half reads it all (the first stops at the split)
    decompressed_bytes: int  # the second half: the whole document's
    event_count: int


def stream_half(path: str | Path, sink: Callable[[list[Event]], None] | None, split_at: int, *, second: bool,
                piece_bytes: int | None = None, chunks: Chunks | None = None) -> StreamedHalf | None:
    """:func:`stream_trace` over half of the events: those before (``second=False``) or after the first
    separator ``}`` ws ``,`` ws ``{`` that starts at or after decompressed byte ``split_at``. Two processes can
    read one trace this way, each decoding one half; both find the same separator. Whether it is a real event
    boundary is known only to the first half: its last chunk, ending at that ``}``, decodes only if so. ``None``
    when there is no such separator within 8 MB of ``split_at``, or as :func:`stream_trace`.
    """
    pieces = _Pieces(Path(path), piece_bytes or PIECE_BYTES)
    split = _Split(split_at)
    source = (split.after if second else split.before)(iter(pieces))
    try:
        header, header_keys, trailer, trailer_keys, count = _read_parts(
            source, chunks or _decoding(sink), pieces.piece_bytes, head=not second, tail=second)
    except (_Inconsistent, msgspec.DecodeError, zlib.error, EOFError, OSError, RecursionError):
        return None
    finally:
        source.close()
    if not split.found:
        return None
    doc, keys = (trailer, trailer_keys) if second else (header, header_keys)
    return StreamedHalf(doc=doc, keys=keys, sha256=pieces.source.digest.hexdigest(),
                        decompressed_bytes=pieces.source.size, event_count=count)


def merged_halves(first: StreamedHalf, second: StreamedHalf) -> TraceDoc | None:
    """The top-level keys of the whole document; None where :func:`stream_trace` would give up (duplicates)."""
    if "traceEvents" in first.keys | second.keys or first.keys & second.keys:
        return None
    return _merged(first.doc, second.doc, second.keys)


class _Split:
    """Cuts a stream of decompressed pieces at the first separator starting at or after byte ``at``."""

    _LOOK_MAX = 8 << 20  # no separator within this many bytes after ``at``: no split (one huge event, the trailer)

    def __init__(self, at: int) -> None:
        self.at = at
        self.found = False

    def _pieces(self, pieces: Iterator[bytes], before: bool) -> Iterator[bytes]:
        try:
            yield from self._cut(pieces, before)
        finally:
            close = getattr(pieces, "close", None)
            if close is not None:
                close()  # the file, now rather than when the generator is collected

    def _cut(self, pieces: Iterator[bytes], before: bool) -> Iterator[bytes]:
        pos = 0
        look = bytearray()
        for piece in pieces:
            if not look and pos + len(piece) <= self.at:
                pos += len(piece)
                if before:
                    yield piece
                continue
            if not look:  # the piece holding byte ``at``: what precedes it belongs to the first half
                k = max(0, self.at - pos)
                if before and k:
                    yield piece[:k]
                look += piece[k:]
            else:
                look += piece
            pos += len(piece)
            # The leftmost match in what has arrived is the leftmost in the whole stream: a match starting
            # earlier and ending later would hold only blanks and one "," after its "}", so no other "}".
            m = _SEP.search(look)
            if m is not None:
                self.found = True
                if before:
                    yield bytes(look[:m.start() + 1])
                    return
                yield bytes(look[m.end() - 1:])
                yield from pieces
                return
            if len(look) > self._LOOK_MAX:
                break
        if before and look:
            yield bytes(look)  # no split: the first half reads on to the end (and gives up there)

    def before(self, pieces: Iterator[bytes]) -> Iterator[bytes]:
        return self._pieces(pieces, True)

    def after(self, pieces: Iterator[bytes]) -> Iterator[bytes]:
        return self._pieces(pieces, False)


class _Pieces:
    """The file's decompressed bytes in pieces of at most ``piece_bytes`` (``readahead.stored_pieces``, or the
    pieces of ``ahead`` where a thread already reads them); ``source``: the stored bytes' digest and the size."""

    def __init__(self, path: Path, piece_bytes: int, ahead: readahead.ReadAhead | None = None) -> None:
        self.path, self.ahead = path, ahead
        self.piece_bytes = ahead.piece_bytes if ahead is not None else piece_bytes
        self.source = ahead if ahead is not None else readahead.Source()

    def __iter__(self) -> Iterator[bytes]:
        try:
            if self.ahead is not None:
                yield from self.ahead.pieces()
            else:
                yield from readahead.stored_pieces(self.path, self.source, self.piece_bytes)
        except readahead.EmptyTrace:
            raise _Inconsistent("empty file") from None


def _read(pieces: Iterator[bytes], sink: Chunks, piece_bytes: int) -> tuple[TraceDoc, int]:
    """Header, then event chunks into ``sink``, then the tail; the merged top-level keys and the event count."""
    header, header_keys, trailer, trailer_keys, count = _read_parts(pieces, sink, piece_bytes)
    if "traceEvents" in header_keys | trailer_keys or header_keys & trailer_keys:
        raise _Inconsistent("duplicate top-level keys")
    return _merged(header, trailer, trailer_keys), count


def _read_parts(pieces: Iterator[bytes], sink: Chunks, piece_bytes: int, *,
                head: bool = True, tail: bool = True) -> tuple[TraceDoc, set[str], TraceDoc, set[str], int]:
    """:func:`_read` less the merge: header and its keys, trailer and its keys, event count. ``head=False``:
    ``pieces`` start at an event (the second half of a split read: no header); ``tail=False``: they end with an
    event's ``}`` (the first half: no trailer)."""
    if not head:
        buf = bytearray(1 + 2 * piece_bytes + _SEP_WINDOW)
        n = _put(buf, 0, b"[")
        header, header_keys = TraceDoc(), set()
        return _read_events(pieces, sink, piece_bytes, buf, n, header, header_keys, tail)
    buf = bytearray()
    for piece in pieces:
        searched = max(0, len(buf) - _KEY_OVERLAP)
        if isinstance(piece, readahead.Slot):
            with piece.view() as data:
                buf += data
            piece.release()
        else:
            buf += piece
        if (m := _EVENTS_KEY.search(buf, searched)) is not None:
            break
        if len(buf) > _MAX_HEADER:
            raise _Inconsistent("no traceEvents key near the start")
    else:
        raise _Inconsistent("no traceEvents key")
    head = bytes(buf[:m.start()])
    header, header_keys = _header(head[3:] if head[:3] == _BOM else head)
    # ``buf[:n]`` is "[" + the bytes not decoded yet, in one buffer that is reused rather than shrunk and regrown
    # (a bytearray that shrinks is reallocated, and regrowing it touches fresh pages: ~25 % of the decode time).
    # Each piece is copied in once; a cut is decoded in place: the byte after the event's "}" is a separator's
    # whitespace or "," and is "]" for the decode.
    rest0 = buf[m.end():]
    buf = bytearray(1 + len(rest0) + 2 * piece_bytes + _SEP_WINDOW)
    n = _put(buf, 0, b"[" + rest0)
    del head, rest0
    return _read_events(pieces, sink, piece_bytes, buf, n, header, header_keys, tail)


def _read_events(pieces: Iterator[bytes], sink: Chunks, piece_bytes: int, buf: bytearray,
                 n: int, header: TraceDoc, header_keys: set[str], tail: bool
                 ) -> tuple[TraceDoc, set[str], TraceDoc, set[str], int]:
    count = 0
    decodable_from = 0  # "[" + bytes known not to end at a real boundary: cut after them
    for piece in pieces:
        if isinstance(piece, readahead.Slot):  # read ahead into a buffer with room before it: scanned there
            slot = piece
            try:
                done = None if decodable_from else _in_slot(slot, buf, n, sink)
                if done is None:
                    with slot.view() as data:
                        piece = bytes(data)  # rare (see _in_slot): as any piece
            finally:
                slot.release()
            if done is not None:
                n, decoded = done
                count += decoded
                continue
        if n + len(piece) > len(buf):
            buf.extend(bytes(n + len(piece) - len(buf)))  # only when undecodable bytes are carried
        n = _put(buf, n, piece)
        # Blanks only cannot complete a separator ("}" ws "," ws "{"): skip the scan, so a long run of whitespace
        # between two events is scanned once when the next event arrives, not once per piece (quadratic).
        cut = None if _blank(piece) else _cut(buf, decodable_from, n)
        if cut is None:
            if n > _MAX_CARRY:  # one "event" this long, or no separator at all: not the shape streamed here
                raise _Inconsistent("no event boundary in the carried bytes")
            continue
        end, rest = cut
        separator = buf[end]
        buf[end] = 0x5D  # "]"
        try:
            with memoryview(buf) as view:
                decoded = sink(view[:end + 1])
        except msgspec.ValidationError:  # a DecodeError too, but one only the lenient whole-document path handles
            raise
        except msgspec.DecodeError:  # a false separator: retry with the next piece merged in
            buf[end] = separator
            decodable_from = rest
            if decodable_from > _MAX_CARRY:
                raise _Inconsistent("a chunk does not decode") from None
            continue
        n = _put(buf, 1, buf[rest:n])
        decodable_from = 0
        count += decoded
    if tail:
        decoded, trailer, trailer_keys = _tail(bytes(buf[1:n]), sink)
    else:  # the first half ends with an event's "}": what is left is whole events (or the split was false)
        buf[n:n + 1] = b"]"
        with memoryview(buf) as view:
            decoded = sink(view[:n + 1])
        trailer, trailer_keys = TraceDoc(), set()
    count += decoded
    return header, header_keys, trailer, trailer_keys, count


def _in_slot(slot: readahead.Slot, buf: bytearray, n: int, sink: Chunks) -> tuple[int, int] | None:
    """Decode the events of ``slot`` in its own buffer, with the carried ``buf[:n]`` ("[" + the bytes after the
    last cut) copied into the room before it instead of the piece copied after them (0.4 CPU-s of 2.1 GB on the
    scanning thread): the new carry length in ``buf`` and the events decoded. None where the piece is
    to be handled as bytes are: the carry does not fit the room, the piece is blank, it holds no separator, or
    the cut is a false separator."""
    a, start, end = slot.buf, slot.start, slot.end
    if n > start or (a[start] in _WS_INTS and a[end - 1] in _WS_INTS and not bytes(a[start:end]).strip(_WS)):
        return None
    base = start - n
    a[base:start] = buf[:n]
    cut = _cut(a, base, end)
    if cut is None:
        return None
    stop, rest = cut
    separator = a[stop]
    a[stop] = 0x5D  # "]"
    try:
        with memoryview(a) as view:
            decoded = sink(view[base:stop + 1])
    except msgspec.ValidationError:
        raise
    except msgspec.DecodeError:  # a false separator: the bytes path merges the next piece in
        a[stop] = separator
        return None
    return _put(buf, 1, a[rest:end]), decoded


def _blank(piece: bytes) -> bool:
    """Whether ``piece`` is JSON whitespace only (its ends are checked first: almost every piece fails there)."""
    return piece[:1] in _WS_ENDS and piece[-1:] in _WS_ENDS and not piece.strip(_WS)


def _put(buf: bytearray, at: int, data: bytes | bytearray) -> int:
    """Copy ``data`` into ``buf`` at ``at`` without resizing ``buf``; the new used length."""
    buf[at:at + len(data)] = data
    return at + len(data)


def _cut(buf: bytearray, start: int, n: int) -> tuple[int, int] | None:
    """(end of the chunk, start of the rest) at a separator near the end of ``buf[:n]`` and past ``start``: the
    first one in the last 4 KB, else in the last 32 KB, ... (events are ~300 bytes; a few are far longer)."""
    window = _SEP_WINDOW
    while True:
        m = _SEP.search(buf, max(start, n - window), n)
        if m is not None:
            return m.start() + 1, m.end() - 1
        if n - window <= start:
            return None
        window *= 8


def _header(head: bytes) -> tuple[TraceDoc, set[str]]:
    """Decode ``{ key: value, ...,`` (everything before ``"traceEvents"``) as an object of its own."""
    h = head.rstrip(_WS)
    if h.endswith(b","):
        h = h[:-1].rstrip(_WS)
        if h.endswith((b"{", b",")):  # "{ ," or ",,": not JSON, let the whole-document path say so
            raise _Inconsistent("malformed header")
    elif not h.endswith(b"{"):
        raise _Inconsistent("malformed header")
    obj = h + b"}"
    return _META.decode(obj), set(_KEYS.decode(obj))


def _trailer(rest: bytes) -> tuple[TraceDoc, set[str]] | None:
    """Decode what follows the event array (``, key: value ... }``); None when it is not a plausible end."""
    r = rest.lstrip(_WS).rstrip(_WS_NUL)  # zero padding after the document is ignored, as the whole-document path does
    if r[:1] == b"}":
        return (TraceDoc(), set()) if not r[1:].strip(_WS) else None
    if r[:1] != b"," or r[1:].lstrip(_WS)[:1] == b"}":
        return None
    obj = b"{" + r[1:]
    try:
        return _META.decode(obj), set(_KEYS.decode(obj))
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def _tail(tail: bytes, sink: Chunks) -> tuple[int, TraceDoc, set[str]]:
    """Split the last bytes into events (into ``sink``) and trailer at the ']' that closes the array.

    Candidates are tried from the end; the split is unique (an array that decodes closes at its own ']', so a
    later ']' leaves trailing bytes), so the first candidate where both sides decode is the right one. Most
    candidates (a ']' inside a trailer string) fail the cheap trailer check; only those that pass it cost a decode.
    """
    end, decodes = len(tail), 0
    while (end := tail.rfind(b"]", 0, end)) >= 0 and len(tail) - end <= _MAX_TRAILER:
        trailer = _trailer(tail[end + 1:])
        if trailer is None:
            continue
        if decodes == _MAX_TAIL_DECODES:
            break
        decodes += 1
        try:
            decoded = sink(b"[" + tail[:end] + b"]")
        except msgspec.ValidationError:
            raise
        except msgspec.DecodeError:
            continue
        return decoded, trailer[0], trailer[1]
    raise _Inconsistent("cannot find the end of the event array")


def _merged(header: TraceDoc, trailer: TraceDoc, trailer_keys: set[str]) -> TraceDoc:
    fields = {f: getattr(trailer if f in trailer_keys else header, f) for f in TraceDoc.__struct_fields__}
    return TraceDoc(**fields)
