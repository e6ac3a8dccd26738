"""Read a Kineto trace file (``.json`` / ``.json.gz``) into typed events, with one-line errors for bad input."""

from __future__ import annotations

import gzip
import hashlib
import zlib
from pathlib import Path

import msgspec

from phaseprof.errors import TraceError
from phaseprof.trace.schema import Event, TraceDoc

_GZIP_MAGIC = b"\x1f\x8b"


def read_trace_bytes(path: str | Path) -> tuple[bytes, str]:
    """Return the decompressed JSON bytes and the sha256 of the file as stored on disk."""
    p = Path(path)
    if not p.exists():
        raise TraceError("no such file", path=p)
    if p.is_dir():
        raise TraceError("is a directory, not a trace file", path=p)
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise TraceError(f"cannot read: {e.strerror}", path=p) from None
    if not raw:
        raise TraceError("empty file", path=p)
    sha = hashlib.sha256(raw).hexdigest()
    if raw[:2] == _GZIP_MAGIC:
        try:
            raw = gzip.decompress(raw)
        except (EOFError, OSError, zlib.error) as e:
            raise TraceError(f"corrupt or truncated gzip ({e})", path=p) from None
        if not raw or raw.isspace():  # isspace() stops at the first byte; strip() would copy it all
            raise TraceError("empty trace inside gzip", path=p)
    return raw, sha


def decode_trace(data: bytes, path: str | Path) -> TraceDoc:
    """Decode the JSON document; a bare event array (allowed by the chrome trace format) is accepted too."""
    if data[:3] == b"\xef\xbb\xbf":  # UTF-8 byte-order mark written by some Windows tools
        data = data[3:]
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
        except (msgspec.ValidationError, msgspec.DecodeError):
            raise TraceError(f"unexpected trace structure ({e})", path=path) from None
    except msgspec.DecodeError as e:
        msg = str(e)
        kind = "truncated JSON" if "truncated" in msg.lower() else "not valid JSON"
        raise TraceError(f"{kind} ({msg})", path=path) from None
    if doc.traceEvents is None:
        raise TraceError("no 'traceEvents' array: not a PyTorch profiler / chrome trace", path=path)
    return doc
