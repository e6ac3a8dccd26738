"""Where vLLM 0.23.0 and 0.28.0 differ for hybrid memory, and where they do not."""

from __future__ import annotations

import pytest

from phaseprof.memory import CacheSettings, MemoryInputs, build_memory_plan, kv_layout, shape_from_hf_config
from tests.memory.configs import qwen35_35b_a3b, qwen35_35b_a3b_as_qwen3next


def _plan(version: str, **kw):
    return build_memory_plan(MemoryInputs(model="x", vllm_version=version, **kw), hf_config=qwen35_35b_a3b())


@pytest.mark.parametrize("version", ["0.23", "0.28"])
def test_block_arithmetic_is_the_same_in_both(version):
    L = kv_layout(shape_from_hf_config(qwen35_35b_a3b()), CacheSettings(vllm_version=version))
    assert (L.block_size_tokens, round(L.mamba_padding_pct, 2), L.mamba_cache_mode) == (1056, 0.76, "align")


def test_scratch_is_capture_size_blocks_in_023_but_capped_by_max_num_seqs_in_028():
    kw = dict(gpu="H100", max_model_len=8192, max_num_seqs=2, cudagraph_max_size=8192, max_num_batched_tokens=8192)
    old, new = _plan("0.23", **kw).scratch, _plan("0.28", **kw).scratch
    assert (old.min_blocks, new.min_blocks) == (8192, 2)
    assert old.exceeds_free is True and new.exceeds_free is False
    assert new.scratch_bytes == 2 * 1056 * 2048 * 10


def test_default_capture_size_is_1024_on_blackwell_only_in_028():
    assert _plan("0.23", gpu="B200").serving.max_cudagraph_capture_size == 512
    assert _plan("0.28", gpu="B200").serving.max_cudagraph_capture_size == 1024
    assert _plan("0.28", gpu="H200").serving.max_cudagraph_capture_size == 512


def test_text_only_qwen35_reads_mamba_ssm_dtype_only_in_028():
    cfg = qwen35_35b_a3b()
    cfg["architectures"] = ["Qwen3_5MoeForCausalLM"]
    shape = shape_from_hf_config(cfg)
    assert kv_layout(shape, CacheSettings(vllm_version="0.23")).gdn.ssm_dtype == "bfloat16"
    assert kv_layout(shape, CacheSettings(vllm_version="0.28")).gdn.ssm_dtype == "float32"


def test_qwen3next_never_reads_the_hint_and_rocm_has_no_scratch():
    cfg = qwen35_35b_a3b_as_qwen3next() | {"mamba_ssm_dtype": "float32"}
    assert kv_layout(shape_from_hf_config(cfg), CacheSettings(vllm_version="0.28")).gdn.ssm_dtype == "bfloat16"
    p = _plan("0.23", gpu="MI300X", cudagraph_max_size=8192)
    assert p.scratch.applies is False and p.scratch.scratch_bytes == 0
    assert _plan("0.23", gpu="H100", enforce_eager=True).scratch.applies is False


def test_028_oom_suggests_fewer_sequences():
    p = _plan("0.28", gpu="H100", max_model_len=8192, max_num_seqs=8192, cudagraph_max_size=8192,
              max_num_batched_tokens=8192)
    assert p.scratch.min_blocks == 8192 and p.scratch.exceeds_free
    fix = {f.name: f for f in p.scratch.fixes}["lower max_num_seqs"]
    assert fix.scratch_bytes <= p.scratch.free_bytes
