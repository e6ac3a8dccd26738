"""The disaggregation planner's per-request handoff against a hand computation from a real model config (the
qwen3.5-35b-a3b preset: 10 full-attention + 30 Gated DeltaNet layers), and the link catalogue."""

from __future__ import annotations

import math

import pytest

from phaseprof.memory.kv_plan import CacheSettings, kv_layout
from phaseprof.memory.model_shape import shape_from_hf_config
from phaseprof.pareto.disagg import handoff
from phaseprof.presets import load_preset
from phaseprof.sol.links import link_by_name, load_links


def test_handoff_bytes_equal_a_hand_computation() -> None:
    cfg = load_preset("qwen3.5-35b-a3b").hf_config
    # by hand, bf16 (2 bytes), one GPU, vLLM's hybrid block rule (Platform._align_hybrid_block_size):
    attn_token_layer = 2 * cfg["num_key_value_heads"] * cfg["head_dim"] * 2  # K and V: 2,048 B
    conv_dim = 2 * cfg["linear_num_key_heads"] * cfg["linear_key_head_dim"] + \
        cfg["linear_num_value_heads"] * cfg["linear_value_head_dim"]  # 8,192 channels
    conv = conv_dim * (cfg["linear_conv_kernel_dim"] - 1) * 2  # 49,152 B
    ssm = cfg["linear_num_value_heads"] * cfg["linear_value_head_dim"] * cfg["linear_key_head_dim"] * 2  # 1 MiB
    block = 16 * math.ceil((conv + ssm) / (16 * attn_token_layer))  # 544 tokens
    n_attn = cfg["layer_types"].count("full_attention")
    n_gdn = cfg["layer_types"].count("linear_attention")
    isl = 1024
    expected = math.ceil(isl / block) * block * attn_token_layer * n_attn + (conv + ssm) * n_gdn
    assert (block, n_attn, n_gdn, expected) == (544, 10, 30, 55_214_080)

    layout = kv_layout(shape_from_hf_config(cfg), CacheSettings(vllm_version="0.28", enable_prefix_caching=False))
    h = handoff(layout, isl, link_by_name("nvlink4"))
    assert h.bytes == pytest.approx(expected, rel=0.01)
    assert h.attention_blocks_per_layer == 2 and h.block_size_tokens == block
    assert h.transfer_ms == pytest.approx(expected / 450e9 * 1e3, rel=0.01)


def test_tensor_parallel_halves_what_each_gpu_sends() -> None:
    cfg = load_preset("qwen3.5-35b-a3b").hf_config
    shape = shape_from_hf_config(cfg)
    one, two = (handoff(kv_layout(shape, CacheSettings(vllm_version="0.28", tensor_parallel_size=tp)), 1024,
                        link_by_name("pcie5")) for tp in (1, 2))
    assert two.gdn_bytes * 2 == one.gdn_bytes  # GDN state is sharded by value heads and conv channels


def test_link_catalogue_has_sources() -> None:
    names = {x.name for x in load_links()}
    assert {"nvlink4", "pcie5", "ib-ndr"} <= names
    assert all(x.source and x.gb_per_s > 0 for x in load_links())
