"""Inline Hugging Face configs for the memory tests, with real field values (sources in each docstring).

Kept inline (not presets) so each test shows its input; Hugging Face field names exactly as vLLM reads them.
"""

from __future__ import annotations

import copy
from typing import Any


def qwen35_35b_a3b(*, mamba_ssm_dtype: str | None = "float32", fp8: bool = False) -> dict[str, Any]:
    """Qwen3.5/3.6-35B-A3B (seed 000): 40 layers, 3 GDN : 1 full attention, 2 KV heads x 256, 256 experts of 512,
    GDN 16 key heads / 32 value heads x 128, conv kernel 4. The published text_config carries
    ``"mamba_ssm_dtype": "float32"``; ``None`` drops it (then vLLM's "auto" = the model dtype, bf16)."""
    text = {
        "model_type": "qwen3_5_moe_text", "dtype": "bfloat16", "hidden_size": 2048, "num_hidden_layers": 40,
        "layer_types": ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(40)],
        "full_attention_interval": 4, "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
        "attn_output_gate": True, "linear_conv_kernel_dim": 4, "linear_num_key_heads": 16,
        "linear_key_head_dim": 128, "linear_num_value_heads": 32, "linear_value_head_dim": 128,
        "num_experts": 256, "num_experts_per_tok": 8, "moe_intermediate_size": 512,
        "shared_expert_intermediate_size": 512, "vocab_size": 248320, "tie_word_embeddings": False,
        "max_position_embeddings": 262144,
    }
    if mamba_ssm_dtype is not None:
        text["mamba_ssm_dtype"] = mamba_ssm_dtype
    cfg: dict[str, Any] = {"architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
                           "text_config": text, "vision_config": {"depth": 27, "hidden_size": 1152}}
    if fp8:
        cfg["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}
    return cfg


def qwen35_35b_a3b_as_qwen3next() -> dict[str, Any]:
    """The same decoder as the ``qwen3.5-35b-a3b`` preset runs it (what the lead captures on the H200):
    architecture Qwen3NextForCausalLM, flat config, no ``mamba_ssm_dtype`` field. Qwen3-Next does not read that
    field, so vLLM's "auto" SSM state is the model dtype: bf16."""
    text = qwen35_35b_a3b(mamba_ssm_dtype=None)["text_config"]
    return {**{k: v for k, v in text.items() if k != "dtype"}, "architectures": ["Qwen3NextForCausalLM"],
            "model_type": "qwen3_next", "torch_dtype": "bfloat16", "decoder_sparse_step": 1, "mlp_only_layers": []}


def qwen38_2p4t() -> dict[str, Any]:
    """Qwen3.8-2.4T, DERIVED from seed 004's numbers (no public config exists):
    - 92 layers, 69 GDN + 23 full attention → full_attention_interval 4.
    - Full-Attn "2 KiB per token per layer" in bf16 → 2 (K,V) x kv_heads x head_dim x 2 B = 2048 → 2 KV heads x 256.
    - GDN state "4 MiB + 120 KiB = 4216 KiB", all bf16 ("GDN and Full-Attn are BF16"):
      SSM (v_heads, v_dim, k_dim) x 2 B = 4 MiB → 128 value heads x 128 x 128;
      conv (conv_dim, kernel - 1 = 3) x 2 B = 120 KiB → conv_dim 20480 = 2 x k_heads x 128 + 128 x 128
      → 16 key heads.
    - "1242 GiB expert weights", 92 x 512 experts in NVFP4 (0.5 B + one fp8 scale per 16):
      hidden 8192 with moe_intermediate 2048 gives 3 x 8192 x 2048 x 512 x 92 x 0.5625 B = 1242.0 GiB.
    Attention heads (64) and the absence of a shared expert are guesses; no assertion depends on them."""
    return {
        "architectures": ["Qwen3_5MoeForCausalLM"], "model_type": "qwen3_5_moe_text", "dtype": "bfloat16",
        "hidden_size": 8192, "num_hidden_layers": 92, "full_attention_interval": 4,
        "num_attention_heads": 64, "num_key_value_heads": 2, "head_dim": 256, "attn_output_gate": True,
        "linear_conv_kernel_dim": 4, "linear_num_key_heads": 16, "linear_key_head_dim": 128,
        "linear_num_value_heads": 128, "linear_value_head_dim": 128,
        "num_experts": 512, "num_experts_per_tok": 10, "moe_intermediate_size": 2048,
        "vocab_size": 248320, "tie_word_embeddings": False, "max_position_embeddings": 262144,
        "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4",
                                "ignore": ["lm_head", "*self_attn*", "*linear_attn*", "*mlp.gate"]},
    }


def llama31_8b() -> dict[str, Any]:
    """meta-llama/Llama-3.1-8B-Instruct config.json: 32 layers, 32 heads, 8 KV heads x 128, untied."""
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
        "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
        "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072,
        "torch_dtype": "bfloat16", "tie_word_embeddings": False, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
    }


def without(cfg: dict[str, Any], *fields: str) -> dict[str, Any]:
    """A copy of ``cfg`` with ``fields`` removed from the top level and from text_config."""
    out = copy.deepcopy(cfg)
    for f in fields:
        out.pop(f, None)
        if isinstance(out.get("text_config"), dict):
            out["text_config"].pop(f, None)
    return out
