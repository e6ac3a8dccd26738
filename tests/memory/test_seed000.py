"""Seed 000: Qwen3.6-35B-A3B-FP8 on an H100 with vLLM 0.23, fp32 GDN SSM state (the config's mamba_ssm_dtype),
bf16 KV, prefix caching off, capture sizes up to 8192. vLLM logged a 1056-token block, 0.76% mamba padding,
and the CUDA-graph profiling pass died with 'Tried to allocate 16.50 GiB ... 11.40 GiB free'."""

from __future__ import annotations

import pytest

from phaseprof.memory import (CacheSettings, MemoryInputs, build_memory_plan, kv_layout, request_cost,
                              shape_from_hf_config)
from phaseprof.memory.defaults import GIB
from tests.memory.configs import qwen35_35b_a3b

SEED_000_RUN = dict(model="Qwen3.6-35B-A3B-FP8", gpu="H100", max_model_len=8192, max_num_seqs=2,
                    max_num_batched_tokens=8192, cudagraph_max_size=8192, gpu_memory_utilization=0.85,
                    prefix_caching=False)


@pytest.fixture(scope="module")
def plan():
    return build_memory_plan(MemoryInputs(**SEED_000_RUN), hf_config=qwen35_35b_a3b(fp8=True))


def test_block_is_1056_tokens_with_0_76_pct_padding(plan):
    L = plan.layout
    assert L.attn_bytes_per_token_per_layer == 2 * 2 * 256 * 2 == 2048          # "2 KB/token"
    assert L.gdn.ssm_shape == (32, 128, 128) and L.gdn.ssm_dtype == "float32"   # "32 x 128 x 128 x 4 B"
    assert L.gdn.ssm_bytes == 2 * 1024 * 1024                                   # "2.0 MiB per linear layer"
    assert L.gdn.conv_shape == (8192, 3) and L.gdn.conv_bytes == 49152          # "+ a small conv state"
    assert L.block_size_tokens == 1056
    assert f"{L.mamba_padding_pct:.2f}" == "0.76"
    assert L.predicted_log_lines == (
        "Setting attention block size to 1056 tokens to ensure that attention page size is >= mamba page size.",
        "Padding mamba page size by 0.76% to ensure that mamba page size and attention page size are exactly equal.",
    )


def test_block_is_about_22_mb_across_the_10_attention_layers(plan):
    assert plan.layout.num_attention_layers == 10
    assert plan.layout.attention_block_bytes_all_layers == 1056 * 2048 * 10 == 21_626_880   # "~22 MB"
    assert plan.layout.pool_block_bytes == 21_626_880   # group size 10: one pool block spans 10 layers


def test_scratch_is_about_180_gb_and_ooms_on_the_h100(plan):
    sc = plan.scratch
    assert sc.min_blocks == 8192
    assert sc.scratch_bytes == 8192 * 21_626_880                    # 177.2 GB: "≈ 180 GB"
    assert 170e9 < sc.scratch_bytes < 185e9
    assert round(sc.tensor_bytes / GIB, 2) == 16.50                 # "Tried to allocate 16.50 GiB"
    assert sc.exceeds_free is True
    assert sc.tensors_before_oom == 2                               # 2 x 16.5 GiB in use, then "11.40 GiB free"
    assert any("Tried to allocate 16.50 GiB" in w for w in plan.warnings)
    fixes = {f.name: f for f in sc.fixes}
    assert fixes["min_blocks patch"].scratch_bytes == 64 * 21_626_880      # "64 blocks x 1056 tok ≈ 1.4 GB"
    assert fixes["smaller block"].scratch_bytes == 8192 * 544 * 2048 * 10   # bf16 state halves it: 91 GB,
    assert not fixes["smaller block"].fits                                     # still too much on its own
    assert fixes["min_blocks patch"].fits and fixes["enforce eager"].fits
    assert fixes["cap capture size"].fits and fixes["cap capture size"].scratch_bytes <= sc.free_bytes


def test_an_8k_request_and_its_fragmentation():
    layout = kv_layout(shape_from_hf_config(qwen35_35b_a3b()), CacheSettings(enable_prefix_caching=False))
    r = request_cost(layout, 8192)
    assert (r.attention_blocks_per_layer, r.attention_layer_blocks, r.gdn_layer_blocks) == (8, 80, 30)
    assert r.unused_attention_tokens == 8 * 1056 - 8192 == 256
    # Seed: "an 8K request costs only ~160 MB" of pure KV; whole blocks and GDN state make it 238 MB.
    assert 8192 * 2048 * 10 == 167_772_160
    assert r.pool_bytes == 11 * 21_626_880
    assert r.fragmentation_bytes == 256 * 2048 * 10 + 30 * 16384


def test_prefix_caching_keeps_the_block_but_holds_two_gdn_states():
    layout = kv_layout(shape_from_hf_config(qwen35_35b_a3b()), CacheSettings(enable_prefix_caching=True))
    assert layout.block_size_tokens == 1056 and layout.mamba_cache_mode == "align"
    assert request_cost(layout, 8192).gdn_layer_blocks == 60
