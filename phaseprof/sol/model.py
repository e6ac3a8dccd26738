"""What the work model needs from a model config: ``memory.model_shape`` plus the fields it does not read
(DeepSeek's MLA and expert counts, gpt-oss's expert count and sliding window, dense vs MoE layers, weight
bytes under quantization).

Families covered: Llama (dense), Qwen3-MoE, Qwen3-Next / Qwen3.5 / Qwen3.6 (GDN + attention hybrid, shared
expert), gpt-oss (MoE, alternating sliding/full attention, MXFP4 experts), DeepSeek-V3 (MLA, shared expert,
first layers dense).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from phaseprof.errors import PhaseprofError
from phaseprof.memory.model_shape import GdnShape, LayerKind, shape_from_hf_config, text_config

#: Bytes per weight for quantization methods whose weights are smaller than the model dtype. MXFP4 is 4-bit
#: values plus one 8-bit scale per 32 values: 4.25 bits. gpt-oss quantizes only its MoE experts that way.
QUANT_WEIGHT_BYTES: dict[str, float] = {"fp8": 1.0, "mxfp4": 4.25 / 8, "nvfp4": 4.5 / 8, "awq": 0.5, "gptq": 0.5}
#: Which peak a quantized GEMM runs at (FP8 methods on FP8 tensor cores; 4-bit weight-only formats are
#: dequantized to BF16 on GPUs without FP4 units, so BF16 is the conservative choice).
QUANT_COMPUTE: dict[str, str] = {"fp8": "fp8", "nvfp4": "fp4"}
_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


@dataclass(frozen=True)
class MlaShape:
    """DeepSeek multi-head latent attention. ``q_lora_rank`` 0 = plain q projection."""

    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int


@dataclass(frozen=True)
class SolModel:
    """The model's shape for the work model (whole model, no tensor parallelism).

    ``attention_windows``: per attention layer, its sliding window in tokens (None = full attention).
    ``moe_layers``: layers whose MLP is a mixture of experts; the others run a dense MLP of ``intermediate_size``.
    ``shared_intermediate``: total width of the shared expert(s) (0 = none); ``shared_gate``: Qwen's sigmoid gate.
    """

    name: str
    model_type: str
    hidden: int
    vocab: int
    num_layers: int
    attention_windows: tuple[int | None, ...]
    gdn_layers: int
    heads: int
    kv_heads: int
    head_dim: int
    attn_output_gate: bool
    qk_norm: bool
    mla: MlaShape | None
    gdn: GdnShape | None
    intermediate_size: int
    moe_layers: int
    num_experts: int
    top_k: int
    moe_intermediate: int
    shared_intermediate: int
    shared_gate: bool
    act_bytes: float
    weight_bytes: float
    expert_weight_bytes: float
    kv_bytes: float
    state_bytes: float
    compute: str  # "bf16" | "fp8" | "fp4": which peak the GEMMs can reach
    quant: str | None

    @property
    def attention_layers(self) -> int:
        return len(self.attention_windows)

    @property
    def dense_layers(self) -> int:
        return self.num_layers - self.moe_layers


def _moe_layers(cfg: dict[str, Any], num_layers: int, num_experts: int) -> int:
    if not num_experts:
        return 0
    if "first_k_dense_replace" in cfg:  # DeepSeek: dense first, then every moe_layer_freq-th layer
        k, freq = int(cfg["first_k_dense_replace"]), int(cfg.get("moe_layer_freq") or 1)
        return sum(1 for i in range(num_layers) if i >= k and i % freq == 0)
    step = int(cfg.get("decoder_sparse_step") or 1)  # Qwen MoE: layer i is sparse when (i + 1) % step == 0
    dense = {int(i) for i in cfg.get("mlp_only_layers") or ()}
    return sum(1 for i in range(num_layers) if i not in dense and (i + 1) % step == 0)


def _windows(cfg: dict[str, Any], kinds: tuple[LayerKind, ...]) -> tuple[int | None, ...]:
    """Sliding window per attention layer: gpt-oss names layers ``sliding_attention`` / ``full_attention``."""
    types = cfg.get("layer_types") or []
    window = cfg.get("sliding_window")
    if window and len(types) == len(kinds) and "sliding_attention" in types:
        return tuple(int(window) if t == "sliding_attention" else None
                     for t, k in zip(types, kinds) if k is LayerKind.ATTENTION)
    return tuple(None for k in kinds if k is LayerKind.ATTENTION)


def _quant(hf_config: dict[str, Any]) -> str | None:
    q = hf_config.get("quantization_config") or text_config(hf_config).get("quantization_config") or {}
    method = str(q.get("quant_method") or q.get("format") or "").lower()
    if not method:
        return None
    for key in QUANT_WEIGHT_BYTES:
        if key in method:
            return key
    raise PhaseprofError(f"config: quantization {method!r} is not modelled (known: {', '.join(QUANT_WEIGHT_BYTES)})")


def _online(quant: str | None) -> str | None:
    """The engine's online quantization as a modelled method (None: the checkpoint's precision)."""
    q = (quant or "").lower()
    if q in ("", "none", "bf16", "bfloat16", "fp16", "float16", "auto"):
        return None
    if q not in QUANT_WEIGHT_BYTES:
        raise PhaseprofError(f"quantization {q!r} is not modelled (known: {', '.join(QUANT_WEIGHT_BYTES)})")
    return q


def sol_model(hf_config: dict[str, Any], *, name: str = "", quant: str | None = None) -> SolModel:
    """Read a Hugging Face config dict (``config.json`` content). Missing fields → PhaseprofError naming them.

    ``quant``: the engine's own quantization (vLLM's ``quantization="fp8"``, online from bf16 weights: run.json
    ``quant``), for a config that carries no ``quantization_config``; the config's own method wins."""
    cfg = text_config(hf_config)
    if "first_k_dense_replace" in cfg or "kv_lora_rank" in cfg:
        # DeepSeek names its experts differently; give model_shape the names it reads.
        cfg = {**cfg, "num_experts": cfg.get("n_routed_experts", 0),
               "shared_expert_intermediate_size": int(cfg.get("n_shared_experts") or 0)
               * int(cfg.get("moe_intermediate_size") or 0)}
    if "num_experts_per_tok" not in cfg and "experts_per_token" in cfg:  # gpt-oss
        cfg = {**cfg, "num_experts_per_tok": cfg["experts_per_token"]}
    shape = shape_from_hf_config(cfg)
    moe = shape.moe
    mla = None
    if cfg.get("kv_lora_rank"):
        mla = MlaShape(int(cfg.get("q_lora_rank") or 0), int(cfg["kv_lora_rank"]), int(cfg["qk_nope_head_dim"]),
                       int(cfg["qk_rope_head_dim"]), int(cfg["v_head_dim"]))
    quant = _quant(hf_config) or _online(quant)
    act = float(_DTYPE_BYTES.get(shape.model_dtype, 2))
    qbytes = QUANT_WEIGHT_BYTES.get(quant or "", act)
    # gpt-oss's MXFP4 covers the experts only; the other methods here quantize every linear layer.
    experts_only = quant == "mxfp4"
    num_experts = moe.num_experts if moe else 0
    ssm = str(cfg.get("mamba_ssm_dtype") or shape.model_dtype)
    return SolModel(
        name=name or shape.architecture, model_type=shape.model_type, hidden=shape.hidden_size,
        vocab=shape.vocab_size, num_layers=shape.num_layers, attention_windows=_windows(cfg, shape.layer_kinds),
        gdn_layers=shape.num_gdn_layers, heads=shape.num_attention_heads, kv_heads=shape.num_kv_heads,
        head_dim=shape.head_dim, attn_output_gate=shape.attn_output_gate, qk_norm=shape.qk_norm, mla=mla,
        gdn=shape.gdn, intermediate_size=shape.intermediate_size,
        moe_layers=_moe_layers(cfg, shape.num_layers, num_experts), num_experts=num_experts,
        top_k=moe.num_experts_per_tok if moe else 0, moe_intermediate=moe.moe_intermediate_size if moe else 0,
        shared_intermediate=moe.shared_expert_intermediate_size if moe else 0,
        shared_gate=bool(moe and moe.shared_expert_intermediate_size and "shared_expert_intermediate_size"
                         in text_config(hf_config)),
        act_bytes=act, weight_bytes=act if experts_only else qbytes, expert_weight_bytes=qbytes,
        kv_bytes=act, state_bytes=float(_DTYPE_BYTES.get(ssm.replace("torch.", ""), act)),
        compute=QUANT_COMPUTE.get(quant or "", "bf16"), quant=quant,
    )
