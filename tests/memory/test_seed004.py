"""Seed 004: Qwen3.8-2.4T's per-request KV arithmetic. The config is DERIVED from the seed's numbers
(tests/memory/configs.py::qwen38_2p4t says how); the seed runs PD decode without prefix caching (1 GDN block)."""

from __future__ import annotations

import pytest

from phaseprof.memory import CacheSettings, capacity, kv_layout, request_cost, shape_from_hf_config
from phaseprof.memory.defaults import GIB, KIB, MIB
from phaseprof.memory.params import count_weights
from tests.memory.configs import qwen38_2p4t


@pytest.fixture(scope="module")
def layout():
    return kv_layout(shape_from_hf_config(qwen38_2p4t()), CacheSettings(enable_prefix_caching=False))


def test_state_sizes_match_the_seed(layout):
    assert (layout.num_gdn_layers, layout.num_attention_layers) == (69, 23)
    assert layout.attn_bytes_per_token_per_layer == 2 * KIB                 # "One token needs 2 KiB per layer"
    assert layout.gdn.ssm_bytes == 4 * MIB and layout.gdn.conv_bytes == 120 * KIB
    assert layout.gdn.state_bytes == 4216 * KIB                              # "4 MiB + 120 KiB = 4216 KiB"


def test_block_is_2112_tokens_of_4_125_mib(layout):
    assert 4216 * KIB // (2 * KIB) == 2108                                   # "dominates ... 2108 times"
    assert layout.block_size_tokens == 2112                                  # "align(2108, 16) = 132 * 16"
    assert layout.page_bytes == 2112 * 2 * KIB == int(4.125 * MIB)


def test_one_10240_token_request_is_184_blocks_and_759_mib(layout):
    r = request_cost(layout, 10240)
    assert r.attention_blocks_per_layer == 5
    assert (r.attention_layer_blocks, r.gdn_layer_blocks, r.layer_blocks) == (115, 69, 184)
    assert round(r.attention_bytes / MIB) == 474 and round(r.gdn_bytes / MIB) == 285
    assert r.attention_bytes + r.gdn_bytes == 184 * 4.125 * MIB == 759 * MIB
    # vLLM's own unit: groups of 23 layers (1 attention + 3 GDN groups) → 5 + 3 pool blocks, same bytes.
    assert (layout.group_size_layers, layout.attention_groups, layout.gdn_groups) == (23, 1, 3)
    assert r.pool_blocks == 8 and r.pool_bytes == 759 * MIB


def test_concurrency_is_the_kv_cache_divided_by_759_mib(layout):
    kv = 200 * GIB
    cap = capacity(layout, kv_cache_bytes=kv, max_model_len=10240)
    assert cap.max_concurrency == pytest.approx((kv // (23 * layout.page_bytes)) / 8)
    assert cap.max_concurrency == pytest.approx(kv / (759 * MIB), rel=0.01)


def test_expert_weights_are_1242_gib_in_nvfp4():
    w = count_weights(shape_from_hf_config(qwen38_2p4t()))
    experts = next(c for c in w.components if c.name == "routed experts")
    assert round(experts.bytes_per_gpu / GIB) == 1242                        # "1242 GiB — expert weights"
    assert all(not c.quantized for c in w.components if c.name.startswith(("attention", "GDN")))
