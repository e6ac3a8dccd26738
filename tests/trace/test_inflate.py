"""gzip inflation (``trace.limits.inflate``): ISA-L's inflater, when the optional ``isal`` package is installed,
gives the bytes and the errors zlib gives (``zlib.error`` for a corrupt member, ``EOFError`` for a truncated one)."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Callable
from typing import Any

import pytest

from phaseprof.trace import limits

from ..conftest import REPO

TRACE = REPO / "traces" / "h200" / "plain" / "graph_decode_plain_profiler_6steps.json.gz"


def _zlib() -> tuple[Callable[..., Any], type[Exception]]:
    return zlib.decompressobj, zlib.error


def _isal() -> tuple[Callable[..., Any], type[Exception]]:
    isal_zlib = pytest.importorskip("isal.isal_zlib")  # optional extra (phaseprof[fast]): absent is fine
    return isal_zlib.decompressobj, isal_zlib.error


@pytest.fixture(params=[_zlib, _isal], ids=["zlib", "isal"])
def inflater(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    chosen = request.param()
    monkeypatch.setattr(limits, "_inflater", lambda: chosen)


def inflated(data: bytes, block: int = 1 << 16, piece: int = 1 << 20) -> bytes:
    blocks = (data[i:i + block] for i in range(0, len(data), block))
    return b"".join(limits.inflate(blocks, piece))


def test_real_trace_inflates_to_gzip_dc_bytes(inflater: None) -> None:
    raw = TRACE.read_bytes()
    assert inflated(raw, piece=1 << 16) == gzip.decompress(raw)


def test_members_and_padding(inflater: None) -> None:
    data = gzip.compress(b'{"a": 1') + gzip.compress(b', "b": 2}') + b"\0" * 100
    assert inflated(data, block=7) == b'{"a": 1, "b": 2}'


def test_corrupt_member_is_a_zlib_error(inflater: None) -> None:
    raw = bytearray(gzip.compress(TRACE.read_bytes()[:200_000]))
    raw[-8] ^= 0xFF  # the CRC32 of the member
    with pytest.raises(zlib.error):
        inflated(bytes(raw))


def test_truncated_member_is_eof(inflater: None) -> None:
    raw = TRACE.read_bytes()
    with pytest.raises(EOFError):
        inflated(raw[:len(raw) // 2])
