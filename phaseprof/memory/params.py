"""Weight parameters and bytes counted from the config, by component.

Counts follow vLLM's Qwen3-Next/Qwen3.5 and Llama modules: full attention has q (doubled when
``attn_output_gate``), k, v, o projections plus per-head q/k norms; a GDN layer has in_proj_qkv, in_proj_z,
in_proj_b, in_proj_a, conv1d, dt_bias, A_log, a gated norm and out_proj; an MoE layer has a router, experts
(gate, up, down), a shared expert and its 1-wide gate. Excluded: vision towers, MTP draft layers (loaded only
with speculative decoding) and rotary buffers. Quantized checkpoints store their big linear layers in fewer
bits plus scales; embeddings, lm_head, norms, routers and GDN's small projections stay in the model dtype.
Bytes are per GPU: sharded parts divided by tp, replicated parts (norms, router, KV heads when
``num_key_value_heads < tp``) whole.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from phaseprof.memory.defaults import FP8_BLOCK_SCALE_BYTES
from phaseprof.memory.dtypes import dtype_bytes
from phaseprof.memory.model_shape import ModelShape


@dataclass(frozen=True)
class Component:
    """One weight group: ``params`` over the whole model, ``bytes_per_gpu`` after quantization and TP."""

    name: str
    params: int
    bytes_per_param: float
    quantized: bool
    bytes_per_gpu: int


@dataclass(frozen=True)
class WeightEstimate:
    components: tuple[Component, ...]
    format: str

    @property
    def params(self) -> int:
        return sum(c.params for c in self.components)

    @property
    def bytes_per_gpu(self) -> int:
        return sum(c.bytes_per_gpu for c in self.components)


def quantized_bytes_per_param(quant: dict[str, Any], model_dtype_bytes: int) -> tuple[float, str]:
    """Bytes per weight of a quantized linear layer, scales included, from ``quantization_config``."""
    method = str(quant.get("quant_method", "")).lower()
    algo = str(quant.get("quant_algo", "")).upper()
    if not method:
        return float(model_dtype_bytes), "unquantized"
    if method == "fp8":
        block = quant.get("weight_block_size")
        scale = FP8_BLOCK_SCALE_BYTES / (block[0] * block[1]) if block else 0.0
        return 1.0 + scale, f"fp8{' block ' + 'x'.join(map(str, block)) if block else ''}"
    if "fp4" in method or "NVFP4" in algo or method == "modelopt_fp4":
        return 0.5 + 1 / 16, "nvfp4 (e2m1 + fp8 scale per 16)"
    if method == "mxfp4":
        return 0.5 + 1 / 32, "mxfp4 (e2m1 + e8m0 scale per 32)"
    if method in {"awq", "gptq", "awq_marlin", "gptq_marlin"}:
        bits, group = int(quant.get("bits", 4)), int(quant.get("group_size", 128) or 128)
        return bits / 8 + 4 / group, f"{method} int{bits} g{group}"  # fp16 scale + packed zero per group
    if method == "compressed-tensors":
        groups = quant.get("config_groups") or {}
        w = next(iter(groups.values()), {}).get("weights", {}) if groups else {}
        bits = int(w.get("num_bits", 8))
        group = w.get("group_size") or 0
        return bits / 8 + (2 / group if group else 0.0), f"compressed-tensors int/fp{bits}"
    return float(model_dtype_bytes), f"unknown quant_method {method!r}: counted as {model_dtype_bytes}-byte weights"


def _ignored(quant: dict[str, Any], key: str) -> bool:
    """Whether the checkpoint's ignore list names the module ``key`` itself (``...linear_attn`` or a regex
    mentioning it), not merely one of its children (``linear_attn.in_proj_a``)."""
    lists = [quant.get(k) or [] for k in ("modules_to_not_convert", "ignored_layers", "ignore", "exclude_modules")]
    for entry in (str(e) for lst in lists for e in lst):
        body = entry[3:] if entry.startswith("re:") else entry
        if body.rstrip(".*$").endswith(key):
            return True
    return False


def count_weights(shape: ModelShape, *, tp: int = 1) -> WeightEstimate:
    h, s = shape.hidden_size, shape
    dt = dtype_bytes(s.model_dtype)
    qbytes, fmt = quantized_bytes_per_param(s.quantization, dt)
    n_attn, n_gdn, n = s.num_attention_layers, s.num_gdn_layers, s.num_layers
    parts: list[tuple[str, int, bool, bool]] = []  # name, params, quantizable, sharded by tp

    q_out = s.num_attention_heads * s.head_dim * (2 if s.attn_output_gate else 1)
    kv_out = s.num_kv_heads * s.head_dim
    bias = (q_out + 2 * kv_out + h) if s.attention_bias else 0
    o_in = s.num_attention_heads * s.head_dim
    parts.append(("attention q/o projections", n_attn * (h * q_out + o_in * h), True, True))
    parts.append(("attention k/v projections", n_attn * 2 * h * kv_out, True, s.num_kv_heads >= tp))
    parts.append(("attention norms and biases", n_attn * (2 * s.head_dim * s.qk_norm + bias), False, False))
    if s.gdn is not None and n_gdn:
        g = s.gdn
        v_dim = g.num_value_heads * g.value_head_dim
        parts.append(("GDN projections (qkv, z, out)", n_gdn * (h * g.conv_dim + h * v_dim + v_dim * h), True, True))
        small = h * 2 * g.num_value_heads + g.conv_dim * g.conv_kernel + 2 * g.num_value_heads + g.value_head_dim
        parts.append(("GDN a/b, conv1d, dt, A_log, norm", n_gdn * small, False, True))
    moe_layers = [i for i in range(n) if s.moe is not None and i not in s.mlp_only_layers]
    dense_layers = n - len(moe_layers)
    if s.moe is not None and moe_layers:
        m, k = s.moe, len(moe_layers)
        parts.append(("routed experts", k * m.num_experts * 3 * h * m.moe_intermediate_size,
                      not _ignored(s.quantization, "experts"), True))
        if m.shared_expert_intermediate_size:
            parts.append(("shared expert", k * 3 * h * m.shared_expert_intermediate_size,
                          not _ignored(s.quantization, "shared_expert"), True))
            parts.append(("shared expert gate", k * h, False, False))
        parts.append(("router", k * h * m.num_experts, False, False))
    if dense_layers:
        parts.append(("dense MLP", dense_layers * 3 * h * s.intermediate_size, True, True))
    parts.append(("layer norms", n * 2 * h + h, False, False))
    parts.append(("embeddings", s.vocab_size * h, False, True))
    if not s.tie_word_embeddings:
        parts.append(("lm_head", s.vocab_size * h, False, True))

    comps = []
    for name, params, quantizable, sharded in parts:
        if "attention" in name and _ignored(s.quantization, "self_attn"):
            quantizable = False
        if name.startswith("GDN") and _ignored(s.quantization, "linear_attn"):
            quantizable = False
        bpp = qbytes if quantizable else float(dt)
        per_gpu = round(params * bpp / (tp if sharded else 1))
        comps.append(Component(name, params, bpp, quantizable and bpp != dt, per_gpu))
    return WeightEstimate(tuple(c for c in comps if c.params), fmt)
