"""Read a Kineto trace file (``.json`` / ``.json.gz``) into typed events, with one-line errors for bad input."""

from __future__ import annotations

import hashlib
import zlib
from pathlib import Path

import msgspec

from phaseprof.errors import TraceError
from phaseprof.trace.limits import GZIP_MAGIC, MAX_WHOLE_DOCUMENT_BYTES, bounded, inflate, open_trace
from phaseprof.trace.schema import Event, TraceDoc


def read_trace_bytes(path: str | Path) -> tuple[bytes, str]:
    """Return the decompressed JSON bytes and the sha256 of the file as stored on disk (``-``: stdin).

    Holds everything in memory, so refuses more than :data:`~phaseprof.trace.limits.MAX_WHOLE_DOCUMENT_BYTES`.
    """
    with open_trace(path) as f:
        try:
            raw = f.read(MAX_WHOLE_DOCUMENT_BYTES + 1)
        except OSError as e:
            raise TraceError(f"cannot read: {e.strerror}", path=path) from None
    if not raw:
        raise TraceError("empty file", path=path)
    if len(raw) > MAX_WHOLE_DOCUMENT_BYTES:
        raise _too_big(path)
    gz = raw[:2] == GZIP_MAGIC
    sha = hashlib.sha256(raw).hexdigest()
    if gz:
        try:
            pieces = list(bounded(inflate(iter((raw,)), 1 << 24), path, max_bytes=MAX_WHOLE_DOCUMENT_BYTES))
        except (EOFError, zlib.error) as e:
            raise TraceError(f"corrupt or truncated gzip ({e})", path=path) from None
        except TraceError as e:
            raise _too_big(path) if "decompresses to" in str(e) else e from None
        raw = b"".join(pieces)
        del pieces
        if not raw or raw.isspace():  # isspace() stops at the first byte; strip() would copy it all
            raise TraceError("empty trace inside gzip", path=path)
    return raw, sha


def _too_big(path: str | Path) -> TraceError:
    return TraceError(f"is not in the shape phaseprof reads in chunks (an object with a traceEvents array) and "
                      f"is over {MAX_WHOLE_DOCUMENT_BYTES >> 20} MB to read whole", path=path)


def decode_trace(data: bytes, path: str | Path) -> TraceDoc:
    """Decode the JSON document; a bare event array (allowed by the chrome trace format) is accepted too."""
    if data[:3] == b"\xef\xbb\xbf":  # UTF-8 byte-order mark written by some Windows tools
        data = data[3:]
    if data[-1:] == b"\0":  # zero padding after the document (a preallocated file): ignored, as gzip does
        data = data.rstrip(b"\0")
    head = data[:4096].lstrip()
    try:
        if head[:1] == b"[":
            return TraceDoc(traceEvents=msgspec.json.decode(data, type=list[Event]))
        if head[:1] != b"{":
            raise TraceError("not a JSON trace (expected an object with traceEvents)", path=path)
        doc = msgspec.json.decode(data, type=TraceDoc)
    except msgspec.ValidationError as e:
        # Real traces sometimes carry odd types; retry leniently before giving up.
        try:
            doc = msgspec.convert(msgspec.json.decode(data), TraceDoc, strict=False)
        except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
            raise TraceError(f"unexpected trace structure ({e})", path=path) from None
    except RecursionError:  # msgspec recurses per nesting level, even through keys it skips
        raise TraceError("JSON nested too deeply (over ~1,000 levels): not a profiler trace", path=path) from None
    except msgspec.DecodeError as e:
        msg = str(e)
        kind = "truncated JSON" if "truncated" in msg.lower() else "not valid JSON"
        raise TraceError(f"{kind} ({msg})", path=path) from None
    if doc.traceEvents is None:
        raise TraceError("no 'traceEvents' array: not a PyTorch profiler / chrome trace", path=path)
    return doc
