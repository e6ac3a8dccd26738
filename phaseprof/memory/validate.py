"""Check a Hugging Face config's memory-relevant fields before any arithmetic: one line naming the file and field.

A hostile or broken ``config.json`` (a list, null, zero heads, ``full_attention_interval: 0``, strings for
layer counts, 10^12 layers, a zero conv kernel) otherwise ends in ZeroDivisionError, MemoryError or negative
byte counts. Limits are generous: ten times the largest public model's value or more.
"""

from __future__ import annotations

from typing import Any

from phaseprof.errors import PhaseprofError
from phaseprof.memory.model_shape import text_config

_BIG = 1 << 24  # dims, heads, experts: 16M (the largest public hidden size is ~30K, vocab ~260K... see _LIMITS)
# field -> (smallest allowed, largest allowed); checked when present and not null.
_LIMITS: dict[str, tuple[int, int]] = {
    "num_hidden_layers": (1, 10_000),  # real models: <= ~200
    "hidden_size": (1, _BIG), "num_attention_heads": (1, _BIG), "num_key_value_heads": (1, _BIG),
    "head_dim": (1, _BIG), "vocab_size": (1, 1 << 28), "intermediate_size": (0, _BIG),
    "linear_num_key_heads": (1, _BIG), "linear_num_value_heads": (1, _BIG), "linear_key_head_dim": (1, _BIG),
    "linear_value_head_dim": (1, _BIG), "linear_conv_kernel_dim": (1, 1 << 16),
    "full_attention_interval": (1, 10_000), "num_experts": (1, 1 << 20), "num_local_experts": (1, 1 << 20),
    "moe_intermediate_size": (0, _BIG), "shared_expert_intermediate_size": (0, _BIG),
    "num_experts_per_tok": (0, 1 << 20), "max_position_embeddings": (1, 1 << 40),
}
# Fields the plan reads with a fallback for null (``cfg.get(f) or ...``); any other null is an error.
_NULLABLE = frozenset({"num_key_value_heads", "head_dim", "intermediate_size", "shared_expert_intermediate_size",
                       "max_position_embeddings"})
_STRINGS = ("model_type", "torch_dtype", "dtype", "mamba_ssm_dtype")


def check_hf_config(hf_config: Any, source: str) -> None:
    """Raise PhaseprofError (``source``: the file or preset) unless the fields the plan reads have sane types
    and ranges. Missing fields are left to :func:`~phaseprof.memory.model_shape.shape_from_hf_config`."""
    def fail(problem: str) -> PhaseprofError:
        return PhaseprofError(f"{source}: {problem}")

    if not isinstance(hf_config, dict):
        raise fail(f"a config is a JSON object, this is {type(hf_config).__name__ if hf_config is not None else 'null'}")
    if "text_config" in hf_config and not isinstance(hf_config["text_config"], (dict, type(None))):
        raise fail("text_config must be an object")
    cfg = text_config(hf_config)
    for field, (lo, hi) in _LIMITS.items():
        if field not in cfg or (cfg[field] is None and field in _NULLABLE):
            continue
        v = cfg[field]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not v.is_integer()):
            raise fail(f"{field} must be an integer, got {_show(v)}")
        if not lo <= v <= hi:
            raise fail(f"{field} must be between {lo:,} and {hi:,}, got {_show(v)}")
    if (problem := _inconsistency(cfg)) is not None:
        raise fail(problem)
    for field in _STRINGS:
        if cfg.get(field) is not None and not isinstance(cfg[field], str):
            raise fail(f"{field} must be a string, got {_show(cfg[field])}")
    archs = hf_config.get("architectures", cfg.get("architectures"))
    if archs is not None and not (isinstance(archs, list) and all(isinstance(a, str) for a in archs)):
        raise fail(f"architectures must be a list of strings, got {_show(archs)}")
    types = cfg.get("layer_types")
    if types is not None and not (isinstance(types, list) and all(isinstance(t, str) for t in types)):
        raise fail(f"layer_types must be a list of strings, got {_show(types)}")
    layers = cfg.get("mlp_only_layers")
    if layers is not None:
        n = cfg.get("num_hidden_layers")
        if not isinstance(layers, list) or not all(type(i) is int and 0 <= i < (n or 0) for i in layers):
            raise fail(f"mlp_only_layers must be a list of layer indices below num_hidden_layers, got {_show(layers)}")
    for key in ("quantization_config",):
        for where in (hf_config, cfg):
            if where.get(key) is not None and not isinstance(where[key], dict):
                raise fail(f"{key} must be an object, got {_show(where[key])}")


def _inconsistency(cfg: dict[str, Any]) -> str | None:
    """The first pair of fields that cannot both hold in one model (each within its range), or None. A plan built
    on them would size a KV cache for a model that does not exist (1000 KV heads of 32 attention heads)."""
    def n(field: str) -> int | None:
        v = cfg.get(field)
        return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    heads, kv, hidden = n("num_attention_heads"), n("num_key_value_heads"), n("hidden_size")
    if heads is not None and kv is not None:
        if kv > heads:
            return f"num_key_value_heads ({kv}) is more than num_attention_heads ({heads})"
        if heads % kv:
            return f"num_attention_heads ({heads}) is not a multiple of num_key_value_heads ({kv})"
    if heads is not None and hidden is not None and n("head_dim") is None and hidden % heads:
        return (f"hidden_size ({hidden}) is not a multiple of num_attention_heads ({heads}) and no head_dim is "
                "given")
    experts = n("num_experts") or n("num_local_experts")
    top_k = n("num_experts_per_tok")
    if experts is not None and top_k is not None and top_k > experts:
        return f"num_experts_per_tok ({top_k}) is more than the {experts} experts"
    lk, lv = n("linear_num_key_heads"), n("linear_num_value_heads")
    if lk is not None and lv is not None and lv % lk:
        return f"linear_num_value_heads ({lv}) is not a multiple of linear_num_key_heads ({lk})"
    return None


def _show(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."
