"""Parsers behind --engine-arg and the sweep lists: input and expected output side by side."""

from __future__ import annotations

import pytest

from phaseprof.capture.shared.options import parse_engine_arg, parse_engine_args, parse_int_list
from phaseprof.errors import PhaseprofError


@pytest.mark.parametrize(("text", "expected"), [
    ("max_model_len=8192", ("max_model_len", 8192)),
    ("gpu_memory_utilization=0.9", ("gpu_memory_utilization", 0.9)),
    ("enforce_eager=true", ("enforce_eager", True)),
    ("enforce_eager=False", ("enforce_eager", False)),
    ("max-num-seqs=4", ("max_num_seqs", 4)),
    ("dtype=bfloat16", ("dtype", "bfloat16")),
    ('compilation_config={"cudagraph_capture_sizes": [1, 2]}',
     ("compilation_config", {"cudagraph_capture_sizes": [1, 2]})),
    ("kv_cache_dtype=fp8_e4m3", ("kv_cache_dtype", "fp8_e4m3")),
    ("quantization=None", ("quantization", None)),
    ("a=b=c", ("a", "b=c")),
])
def test_parse_engine_arg(text: str, expected: tuple) -> None:
    assert parse_engine_arg(text) == expected


@pytest.mark.parametrize("text", ["max_model_len", "=3", "9x=1", "max model len=1"])
def test_parse_engine_arg_rejects(text: str) -> None:
    with pytest.raises(PhaseprofError, match="bad --engine-arg"):
        parse_engine_arg(text)


def test_repeated_engine_arg_keeps_last() -> None:
    assert parse_engine_args(["max_num_seqs=2", "max_num_seqs=8"]) == {"max_num_seqs": 8}
    assert parse_engine_args(None) == {}


@pytest.mark.parametrize(("spec", "expected"), [
    ("128,256,512", [128, 256, 512]),
    ("512,128,128", [128, 512]),
    ("128:512:128", [128, 256, 384, 512]),
    ("100:350:100", [100, 200, 300]),
    ("128..1024x2", [128, 256, 512, 1024]),
    ("128..1000x2", [128, 256, 512]),
    ("1,2,4:16:4", [1, 2, 4, 8, 12, 16]),
    (" 64 , 32 ", [32, 64]),
])
def test_parse_int_list(spec: str, expected: list[int]) -> None:
    assert parse_int_list(spec) == expected


@pytest.mark.parametrize("spec", ["", "abc", "128:64:1", "1:10:0", "8..64x1", "0", "0..8x2", "12.5"])
def test_parse_int_list_rejects(spec: str) -> None:
    with pytest.raises(PhaseprofError):
        parse_int_list(spec)
