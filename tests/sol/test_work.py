"""Work model against hand calculations: each expected number is written out from the config's fields
(named in the comment), not computed by the code under test.

Configs: the presets qwen3.5-35b-a3b (H=2048, 40 layers = 30 GDN + 10 attention, 16 heads / 2 KV of 256 with
output gate, GDN 16 key / 32 value heads of 128, conv 4, 256 experts of 512, top-8, shared 512, vocab 248320),
llama-3.1-8b (H=4096, 32 layers, 32 heads / 8 KV of 128, MLP 14336, vocab 128256) and qwen3-30b-a3b (H=2048,
48 layers, 32 heads / 4 KV of 128, 128 experts of 768, top-8, no shared expert, vocab 151936); bf16 (2 bytes).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from phaseprof.presets import load_preset
from phaseprof.sol.model import sol_model
from phaseprof.sol.work import (COMPONENT_BUCKET, Component, StepTokens, attention, attn_proj, dense_mlp,
                                distinct_experts, elementwise, gdn, gdn_conv, gdn_proj, lm_head, norm, router,
                                routed_experts, shared_expert, step_work)

PREFILL = StepTokens(prefill_lens=(4096,))
DECODE = StepTokens(decode_kv_lens=(129,))  # one sequence, 128 prompt tokens + the new one


@pytest.fixture(scope="module")
def a3b():
    return sol_model(load_preset("qwen3.5-35b-a3b").hf_config)


@pytest.fixture(scope="module")
def llama():
    return sol_model(load_preset("llama-3.1-8b").hf_config)


@pytest.fixture(scope="module")
def q30():
    return sol_model(load_preset("qwen3-30b-a3b").hf_config)


def test_config_reading(a3b, llama, q30):
    assert (a3b.attention_layers, a3b.gdn_layers, a3b.moe_layers, a3b.dense_layers) == (10, 30, 40, 0)
    assert (a3b.num_experts, a3b.top_k, a3b.moe_intermediate, a3b.shared_intermediate) == (256, 8, 512, 512)
    assert a3b.attn_output_gate and a3b.shared_gate and a3b.compute == "bf16"
    assert (llama.attention_layers, llama.moe_layers, llama.dense_layers, llama.intermediate_size) == (32, 0, 32, 14336)
    assert (q30.attention_layers, q30.moe_layers, q30.num_experts, q30.shared_intermediate) == (48, 48, 128, 0)


def test_distinct_experts_expectation():
    assert distinct_experts(256, 8, 1) == pytest.approx(8.0)  # one token: exactly its k experts
    assert distinct_experts(128, 8, 2) == pytest.approx(128 * (1 - (15 / 16) ** 2))  # 15.5
    assert distinct_experts(256, 8, 4096) == pytest.approx(256.0)  # (31/32)^4096 ~ e^-130
    assert distinct_experts(256, 8, 0) == 0.0


# ------------------------------------------------------------------------------------ 35B-A3B hybrid
def test_a3b_routed_experts_prefill_is_the_issue_sanity_figure(a3b):
    w = routed_experts(a3b, PREFILL)
    assert w.flops == 2 * 4096 * 8 * (2048 * 1024 + 512 * 2048) * 40 == 8_246_337_208_320  # 8.25 TFLOP
    weights = 256 * 3 * 2048 * 512 * 2 * 40  # every expert touched, read once
    acts = (4096 * 2048 + 4096 * 8 * (1024 + 512 + 2048)) * 2 * 40
    assert w.bytes == pytest.approx(weights + acts, rel=1e-12)


def test_a3b_routed_experts_decode(a3b):
    w = routed_experts(a3b, DECODE)
    assert w.flops == 2 * 8 * (2048 * 1024 + 512 * 2048) * 40
    assert w.bytes == pytest.approx(8 * 3 * 2048 * 512 * 2 * 40 + (2048 + 8 * 3584) * 2 * 40)


def test_a3b_router_and_shared_expert(a3b):
    assert router(a3b, PREFILL).flops == 2 * 4096 * 2048 * 256 * 40
    s = shared_expert(a3b, DECODE)
    # gate_up 2048->1024, down 512->2048, sigmoid gate 2048->1
    assert s.flops == 2 * (2048 * 1024 + 512 * 2048 + 2048) * 40
    assert s.bytes == (2048 * 1024 + 512 * 2048 + 2048) * 2 * 40 + ((2048 + 1024) + (512 + 2048) + (2048 + 1)) * 2 * 40


def test_a3b_projections(a3b):
    # q (with gate) 16*256*2 = 8192, k and v 2*256 each: 9216 outputs; o 4096 -> 2048
    assert attn_proj(a3b, PREFILL).flops == (2 * 4096 * 2048 * 9216 + 2 * 4096 * 4096 * 2048) * 10
    # in_proj_qkvz 2048 -> 2*16*128 + 2*32*128 = 12288, in_proj_ba 2048 -> 64, out_proj 4096 -> 2048
    g = gdn_proj(a3b, DECODE)
    assert g.flops == 2 * (2048 * 12288 + 2048 * 64 + 4096 * 2048) * 30
    assert g.bytes == ((2048 * 12288 + 2048 * 64 + 4096 * 2048) * 2 + (2048 + 12288 + 2048 + 64 + 4096 + 2048) * 2) * 30
    lm = lm_head(a3b, PREFILL)  # logits for the last prompt token only
    assert lm.flops == 2 * 2048 * 248320
    assert lm.bytes == 2048 * 248320 * 2 + (2048 + 248320) * 2


def test_a3b_attention(a3b):
    # causal 4096: 4096*4097/2 pairs; QK^T and PV: 2*16*(256+256) FLOPs per pair; 10 layers
    assert attention(a3b, PREFILL).flops == 2 * 16 * 512 * (4096 * 4097 // 2) * 10
    d = attention(a3b, DECODE)
    assert d.flops == 2 * 16 * 512 * 129 * 10
    # q in + o out (16*256 each), cached K/V of 129 tokens read + the new token's K/V written (2*2*256 per token)
    assert d.bytes == (16 * 512 * 2 + 130 * 2 * 2 * 256 * 2) * 10


def test_a3b_gdn(a3b):
    d = gdn(a3b, DECODE)
    assert d.flops == 32 * 7 * 128 * 128 * 30
    state = 32 * 128 * 128 * 2  # bf16 recurrent state per sequence and layer
    io = (2 * 16 * 128 + 2 * 32 * 128 + 2 * 32) * 2  # q, k, v, o, gates
    assert d.bytes == (io + 2 * state) * 30
    p = gdn(a3b, PREFILL)
    per_token_head = 6 * 64 * 128 + 4 * 64 * 128 + 6 * 128 * 128 + 2 * 64 * 64 / 3
    assert p.flops == pytest.approx(4096 * 32 * per_token_head * 30)
    conv = gdn_conv(a3b, PREFILL)
    conv_dim = 2 * 16 * 128 + 32 * 128  # 8192 channels
    assert conv.flops == 2 * 4 * conv_dim * 4096 * 30
    assert conv.bytes == (2 * 4096 * conv_dim + 2 * 3 * conv_dim) * 2 * 30


def test_a3b_decode_step_weights_bound(a3b):
    # batch 1 decode moves about 6 GB (the active weights), as the issue's example says
    total = sum(w.bytes for w in step_work(a3b, DECODE).values())
    assert 5.8e9 < total < 6.2e9
    assert {str(COMPONENT_BUCKET[c]) for c in step_work(a3b, DECODE)} == {"gemm", "moe", "attention", "gdn", "norm", "elementwise"}


# ---------------------------------------------------------------------------------------- Llama 8B
def test_llama_prefill(llama):
    m = dense_mlp(llama, PREFILL)
    assert m.flops == (2 * 4096 * 4096 * 28672 + 2 * 4096 * 14336 * 4096) * 32
    a = attn_proj(llama, PREFILL)  # qkv 4096 -> 32*128 + 2*8*128 = 6144; o 4096 -> 4096
    assert a.flops == (2 * 4096 * 4096 * 6144 + 2 * 4096 * 4096 * 4096) * 32
    assert attention(llama, PREFILL).flops == 2 * 32 * 256 * (4096 * 4097 // 2) * 32
    assert Component.ROUTED_EXPERTS not in step_work(llama, PREFILL)


def test_llama_decode(llama):
    m = dense_mlp(llama, DECODE)
    assert m.bytes == (4096 * 28672 + 14336 * 4096) * 2 * 32 + (4096 + 28672 + 14336 + 4096) * 2 * 32
    d = attention(llama, DECODE)
    assert d.flops == 2 * 32 * 256 * 129 * 32
    assert d.bytes == (32 * 256 * 2 + 130 * 2 * 8 * 128 * 2) * 32
    total = sum(w.bytes for w in step_work(llama, DECODE).values())
    assert 14.9e9 < total < 15.2e9  # ~7.5 G parameters in bf16


# --------------------------------------------------------------------------------------- Qwen3-30B-A3B
def test_qwen3_30b(q30):
    assert routed_experts(q30, PREFILL).flops == 2 * 4096 * 8 * (2048 * 1536 + 768 * 2048) * 48
    d = routed_experts(q30, DECODE)
    assert d.bytes == pytest.approx(8 * 3 * 2048 * 768 * 2 * 48 + (2048 + 8 * (1536 + 768 + 2048)) * 2 * 48)
    two = routed_experts(q30, StepTokens(decode_kv_lens=(10, 10)))
    assert two.bytes == pytest.approx(15.5 * 3 * 2048 * 768 * 2 * 48 + (2 * 2048 + 16 * 4352) * 2 * 48)
    assert shared_expert(q30, PREFILL).flops == 0
    assert attn_proj(q30, DECODE).flops == (2 * 2048 * (4096 + 1024) + 2 * 4096 * 2048) * 48
    assert attention(q30, PREFILL).flops == 2 * 32 * 256 * (4096 * 4097 // 2) * 48


def test_qwen3_30b_norm_and_elementwise_bytes(q30, llama):
    """The H200 qwen3-30b-a3b 4K prefill's norm bucket ran at 126% of a floor that counted the
    per-head q/k norms as their own pass (their torch.compile kernels are classified elementwise, fused with
    RoPE). Norm: 48·2 + 1 = 97 RMSNorms of 4096 × 2048, the first (no residual yet) reads + writes 2 × hidden,
    the other 96 read hidden + residual and write both (4 × hidden); bf16."""
    assert norm(q30, PREFILL).bytes == (96 * 4 + 2) * 4096 * 2048 * 2
    assert norm(llama, PREFILL).bytes == (64 * 4 + 2) * 4096 * 4096 * 2  # 32·2 + 1 norms of 4096 × 4096
    # q/k norm + RoPE: q (32 × 128) and k (4 × 128) read and written once per attention layer
    qk = 48 * 2 * 4096 * (32 + 4) * 128 * 2
    silu = 4096 * 8 * 3 * 768 * 48 * 2  # routed experts' SiLU-and-mul over 4096 × top-8 rows
    topk_sum = 4096 * 9 * 2048 * 48 * 2  # reads 8 expert outputs, writes one hidden state
    assert elementwise(q30, PREFILL).bytes == silu + topk_sum + qk + 2 * 4096 * 2048 * 2  # + embedding lookup


# ------------------------------------------------------------------ other families (public config.json)
DEEPSEEK_V3 = {  # deepseek-ai/DeepSeek-V3 config.json, the fields the work model reads
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 7168,
    "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 128,
    "num_key_value_heads": 128, "n_shared_experts": 1, "n_routed_experts": 256, "num_experts_per_tok": 8,
    "first_k_dense_replace": 3, "moe_layer_freq": 1, "q_lora_rank": 1536, "kv_lora_rank": 512,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 129280,
    "torch_dtype": "bfloat16",
}
GPT_OSS_120B = {  # openai/gpt-oss-120b config.json
    "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": 2880, "intermediate_size": 2880,
    "num_hidden_layers": 36, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
    "num_local_experts": 128, "experts_per_token": 4, "vocab_size": 201088, "sliding_window": 128,
    "layer_types": ["sliding_attention", "full_attention"] * 18, "torch_dtype": "bfloat16",
    "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn"]},
}


def test_deepseek_v3_shape():
    m = sol_model(DEEPSEEK_V3)
    assert (m.moe_layers, m.dense_layers, m.shared_intermediate, m.num_experts) == (58, 3, 2048, 256)
    # decode reads the compressed latent: 512 + 64 per cached token and layer, shared by the 128 heads
    d = attention(m, StepTokens(decode_kv_lens=(1000,)))
    assert d.bytes == (128 * (576 + 512) * 2 + 1001 * 576 * 2) * 61
    assert d.flops == 2 * 128 * (576 + 512) * 1000 * 61
    p = attn_proj(m, StepTokens(prefill_lens=(1,)))
    per_layer = 7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256 + 128 * 128 * 7168
    assert p.flops == 2 * per_layer * 61
    assert dense_mlp(m, PREFILL).flops == 2 * 4096 * 3 * 7168 * 18432 * 3


def test_gpt_oss_sliding_window_and_mxfp4():
    m = sol_model(GPT_OSS_120B)
    assert m.top_k == 4 and m.moe_layers == 36 and m.attention_windows.count(128) == 18
    assert m.expert_weight_bytes == 4.25 / 8 and m.weight_bytes == 2.0
    # full layers: 4096*4097/2 pairs; sliding: tokens 1..128 see j keys, the other 3968 see 128
    pairs_sliding = 128 * 129 // 2 + (4096 - 128) * 128
    want = 2 * 64 * 128 * (4096 * 4097 // 2) * 18 + 2 * 64 * 128 * pairs_sliding * 18
    assert attention(m, PREFILL).flops == want
    w = routed_experts(m, DECODE)
    assert w.bytes == pytest.approx(4 * 3 * 2880 * 2880 * 4.25 / 8 * 36 + (2880 + 4 * (3 * 2880 + 2880)) * 2 * 36)
    assert math.isclose(lm_head(m, DECODE).flops, 2 * 2880 * 201088)


def test_qwen36_fp8_checkpoint_config(a3b):
    """The seed's Qwen3.6-35B-A3B FP8 config.json (tests/memory/data): the preset's decoder, 1-byte weights,
    FP8 GEMM peak, fp32 recurrent state (its mamba_ssm_dtype)."""
    cfg = json.loads((Path(__file__).resolve().parents[1] / "memory" / "data" / "qwen36-35b-a3b-fp8" /
                      "config.json").read_text())
    m = sol_model(cfg)
    assert (m.attention_layers, m.gdn_layers, m.num_experts, m.top_k, m.vocab) == (10, 30, 256, 8, 248320)
    assert (m.quant, m.compute, m.weight_bytes, m.act_bytes, m.state_bytes) == ("fp8", "fp8", 1.0, 2.0, 4.0)
    assert routed_experts(m, DECODE).bytes == pytest.approx(8 * 3 * 2048 * 512 * 1 * 40 + (2048 + 8 * 3584) * 2 * 40)
    assert routed_experts(m, PREFILL).flops == routed_experts(a3b, PREFILL).flops
    assert gdn(m, DECODE).bytes == ((2 * 16 * 128 + 2 * 32 * 128 + 64) * 2 + 2 * 32 * 128 * 128 * 4) * 30
