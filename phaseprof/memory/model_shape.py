"""The memory-relevant shape of a model, read from its Hugging Face ``config.json`` the way vLLM reads it.

Field names are Hugging Face's: ``num_key_value_heads``, ``head_dim``, ``layer_types`` /
``full_attention_interval``, ``linear_num_key_heads``, ``linear_num_value_heads``, ``linear_key_head_dim``,
``linear_value_head_dim``, ``linear_conv_kernel_dim``, ``num_experts``, ``moe_intermediate_size``,
``shared_expert_intermediate_size``. Multimodal wrappers (Qwen3.5) keep them under ``text_config``, which vLLM
reads as ``hf_text_config``; so do we.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from phaseprof.errors import PhaseprofError


class LayerKind(StrEnum):
    ATTENTION = "full_attention"
    GDN = "linear_attention"


@dataclass(frozen=True)
class GdnShape:
    """Gated-DeltaNet dimensions (whole model, before tensor parallelism)."""

    num_key_heads: int
    num_value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel: int

    @property
    def conv_dim(self) -> int:
        """Channels of the causal conv: q, k and v concatenated (``gated_delta_net_state_shape``)."""
        return 2 * self.num_key_heads * self.key_head_dim + self.num_value_heads * self.value_head_dim


@dataclass(frozen=True)
class MoeShape:
    num_experts: int
    moe_intermediate_size: int
    shared_expert_intermediate_size: int
    num_experts_per_tok: int


@dataclass(frozen=True)
class ModelShape:
    """What the memory plan needs from a config. ``layer_kinds`` has one entry per decoder layer."""

    architecture: str
    model_type: str
    model_dtype: str
    num_layers: int
    layer_kinds: tuple[LayerKind, ...]
    hidden_size: int
    vocab_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    attn_output_gate: bool
    qk_norm: bool
    attention_bias: bool
    tie_word_embeddings: bool
    intermediate_size: int
    gdn: GdnShape | None
    moe: MoeShape | None
    mlp_only_layers: tuple[int, ...]
    mamba_ssm_dtype_hint: str | None
    quantization: dict[str, Any]
    max_position_embeddings: int | None

    @property
    def num_attention_layers(self) -> int:
        return sum(k is LayerKind.ATTENTION for k in self.layer_kinds)

    @property
    def num_gdn_layers(self) -> int:
        return sum(k is LayerKind.GDN for k in self.layer_kinds)

    @property
    def is_hybrid(self) -> bool:
        return self.num_gdn_layers > 0 and self.num_attention_layers > 0


_GDN_FIELDS = ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
               "linear_value_head_dim", "linear_conv_kernel_dim")
_BASE_FIELDS = ("num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size")


def text_config(hf_config: dict[str, Any]) -> dict[str, Any]:
    """The language model's fields: ``text_config`` overlaid on the top level (what vLLM calls hf_text_config)."""
    inner = hf_config.get("text_config")
    return {**hf_config, **inner} if isinstance(inner, dict) else dict(hf_config)


def _expects_gdn(cfg: dict[str, Any]) -> bool:
    types = cfg.get("layer_types") or []
    return ("linear_attention" in types or "full_attention_interval" in cfg
            or any(f in cfg for f in _GDN_FIELDS)
            or str(cfg.get("model_type", "")).startswith(("qwen3_next", "qwen3_5")))


def _layer_kinds(cfg: dict[str, Any], num_layers: int, gdn: bool) -> tuple[LayerKind, ...]:
    if not gdn:
        return (LayerKind.ATTENTION,) * num_layers
    types = cfg.get("layer_types")
    if types:
        if len(types) != num_layers:
            raise PhaseprofError(f"config: layer_types has {len(types)} entries but num_hidden_layers is {num_layers}")
        unknown = sorted({t for t in types if t not in {k.value for k in LayerKind}})
        if unknown:
            raise PhaseprofError(
                f"config: unsupported layer_types {unknown} (phaseprof knows full_attention, linear_attention)")
        return tuple(LayerKind(t) for t in types)
    interval = int(cfg["full_attention_interval"])
    # Qwen3-Next: layer i is full attention when (i + 1) % full_attention_interval == 0.
    return tuple(LayerKind.ATTENTION if (i + 1) % interval == 0 else LayerKind.GDN for i in range(num_layers))


def _model_dtype(cfg: dict[str, Any]) -> str:
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16").replace("torch.", "")
    # vLLM's dtype="auto" serves float32 checkpoints in bfloat16 (ModelConfig._get_and_verify_dtype).
    return "bfloat16" if dtype in {"float32", "float"} else dtype


def shape_from_hf_config(hf_config: dict[str, Any]) -> ModelShape:
    """Read a config dict; a config without the needed fields → PhaseprofError naming every missing one."""
    cfg = text_config(hf_config)
    gdn_expected = _expects_gdn(cfg)
    missing = [f for f in _BASE_FIELDS if f not in cfg]
    if gdn_expected:
        missing += [f for f in _GDN_FIELDS if f not in cfg]
        if "layer_types" not in cfg and "full_attention_interval" not in cfg:
            missing.append("layer_types or full_attention_interval")
    is_moe = "num_experts" in cfg or "num_local_experts" in cfg
    if is_moe and "moe_intermediate_size" not in cfg and "intermediate_size" not in cfg:
        missing.append("moe_intermediate_size")
    if missing:
        raise PhaseprofError(f"config lacks fields needed for the memory plan: {', '.join(missing)}")

    num_layers = int(cfg["num_hidden_layers"])
    heads = int(cfg["num_attention_heads"])
    hidden = int(cfg["hidden_size"])
    gdn = GdnShape(*(int(cfg[f]) for f in _GDN_FIELDS)) if gdn_expected else None
    moe = None
    if is_moe:
        moe = MoeShape(
            num_experts=int(cfg.get("num_experts", cfg.get("num_local_experts", 0))),
            moe_intermediate_size=int(cfg.get("moe_intermediate_size", cfg.get("intermediate_size", 0))),
            shared_expert_intermediate_size=int(cfg.get("shared_expert_intermediate_size") or 0),
            num_experts_per_tok=int(cfg.get("num_experts_per_tok", 0)),
        )
    archs = hf_config.get("architectures") or cfg.get("architectures") or ["unknown"]
    return ModelShape(
        architecture=str(archs[0]),
        model_type=str(cfg.get("model_type", "")),
        model_dtype=_model_dtype(cfg),
        num_layers=num_layers,
        layer_kinds=_layer_kinds(cfg, num_layers, gdn_expected),
        hidden_size=hidden,
        vocab_size=int(cfg["vocab_size"]),
        num_attention_heads=heads,
        # vLLM falls back to num_attention_heads (MHA) and hidden_size // heads, as Hugging Face does.
        num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
        head_dim=int(cfg.get("head_dim") or hidden // heads),
        # Qwen3-Next/Qwen3.5 attention gates its output unless told not to (getattr(config, "attn_output_gate", True)).
        attn_output_gate=bool(cfg.get("attn_output_gate", gdn_expected)),
        qk_norm=str(cfg.get("model_type", "")).startswith("qwen3"),  # Qwen3 families norm q and k per head
        attention_bias=bool(cfg.get("attention_bias", False)),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        intermediate_size=int(cfg.get("intermediate_size") or 0),
        gdn=gdn,
        moe=moe,
        mlp_only_layers=tuple(int(i) for i in cfg.get("mlp_only_layers") or ()),
        mamba_ssm_dtype_hint=cfg.get("mamba_ssm_dtype"),
        quantization=dict(hf_config.get("quantization_config") or cfg.get("quantization_config") or {}),
        max_position_embeddings=int(cfg["max_position_embeddings"]) if cfg.get("max_position_embeddings") else None,
    )


def load_hf_config(model: str) -> tuple[dict[str, Any], str]:
    """``model`` is a directory holding ``config.json``, a JSON file, or a preset name.
    Returns the config dict and a label saying where it came from."""
    path = Path(model)
    if path.is_dir():
        path = path / "config.json"
        if not path.is_file():
            raise PhaseprofError(f"{model}: directory has no config.json")
    if path.exists():
        from phaseprof.trace.limits import require_regular_file

        require_regular_file(path, what="config file")  # a FIFO would block the read
        if path.stat().st_size > 64 << 20:
            raise PhaseprofError(f"{path}: over 64 MB, not a model config")
        try:
            return json.loads(path.read_text()), str(path)
        except (OSError, ValueError, RecursionError) as e:  # ValueError: bad JSON or not UTF-8
            raise PhaseprofError(f"{path}: not a readable JSON config ({str(e)[:120]})") from None
    return _load_preset(model), f"preset {model}"


def _load_preset(name: str) -> dict[str, Any]:
    try:
        from phaseprof import presets
    except ImportError:  # pragma: no cover - the package always exists
        presets = None  # type: ignore[assignment]
    loader = getattr(presets, "load_preset", None)
    if loader is None:
        raise PhaseprofError(f"model {name!r} is not a directory with config.json (and no presets are installed yet)")
    try:
        return dict(loader(name).hf_config)
    except PhaseprofError as e:
        raise PhaseprofError(f"model {name!r} is neither a directory with config.json nor a preset: {e}") from e
    except (KeyError, FileNotFoundError, ValueError) as e:
        raise PhaseprofError(f"model {name!r} is neither a directory with config.json nor a known preset ({e})") from e
