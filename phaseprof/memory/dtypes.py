"""Dtype names as vLLM's CLI spells them, their sizes, and how vLLM resolves "auto" for KV and GDN state."""

from __future__ import annotations

from dataclasses import dataclass

from phaseprof.errors import PhaseprofError
from phaseprof.memory.model_shape import ModelShape

DTYPE_BYTES: dict[str, int] = {
    "float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2,
    "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "int8": 1,
}
"""``get_dtype_size`` of ``STR_DTYPE_TO_TORCH_DTYPE[name]`` (vllm/utils/torch_utils.py)."""

KV_CACHE_DTYPES = ("auto", "bfloat16", "float16", "float32", "fp8", "fp8_e4m3", "fp8_e5m2")
"""``--kv-cache-dtype`` values modelled here: plain per-tensor layouts. vLLM also has per-token-head scales,
nvfp4 and turboquant layouts whose pages carry extra bytes; those are refused rather than guessed."""
MAMBA_DTYPES = ("auto", "float32", "float16", "bfloat16")
"""``MambaDType`` (vllm/config/cache.py)."""

QWEN35_SSM_HINT_ARCHS: dict[str, frozenset[str]] = {
    # Architectures whose VerifyAndUpdateConfig copies hf_text_config.mamba_ssm_dtype into
    # cache_config.mamba_ssm_cache_dtype when the user left it "auto" (vllm/model_executor/models/config.py).
    "0.23": frozenset({"Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration", "ColQwen3_5"}),
    "0.28": frozenset({"Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration", "ColQwen3_5",
                       "Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM"}),
}


def dtype_bytes(name: str) -> int:
    try:
        return DTYPE_BYTES[name]
    except KeyError:
        raise PhaseprofError(f"unknown dtype {name!r}; known: {', '.join(DTYPE_BYTES)}") from None


def resolve_kv_dtype(kv_cache_dtype: str, model_dtype: str) -> str:
    """``auto`` → the model dtype (``_align_hybrid_block_size``: ``kv_cache_dtype = model_config.dtype``)."""
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        raise PhaseprofError(
            f"--kv-cache-dtype {kv_cache_dtype!r} is not modelled; use one of {', '.join(KV_CACHE_DTYPES)}")
    return model_dtype if kv_cache_dtype == "auto" else kv_cache_dtype


@dataclass(frozen=True)
class GdnDtypes:
    """Resolved dtypes of the two GDN state tensors, and why the SSM one is what it is."""

    conv_dtype: str
    ssm_dtype: str
    ssm_dtype_source: str


def resolve_gdn_dtypes(shape: ModelShape, *, mamba_cache_dtype: str, mamba_ssm_cache_dtype: str,
                       vllm_version: str, origin: str = "--mamba-ssm-dtype") -> GdnDtypes:
    """Mirror ``MambaStateDtypeCalculator._mamba_state_dtype``: conv = mamba_cache_dtype (auto → model dtype);
    SSM = mamba_ssm_cache_dtype, where "auto" means the conv dtype, unless a Qwen3.5 config's
    ``mamba_ssm_dtype`` was copied in first. ``origin``: where an explicit SSM dtype came from (the flag, or the
    preset that runs with it)."""
    for flag, value in (("--mamba-cache-dtype", mamba_cache_dtype), ("--mamba-ssm-dtype", mamba_ssm_cache_dtype)):
        if value not in MAMBA_DTYPES:
            raise PhaseprofError(f"{flag} {value!r} is not a vLLM mamba dtype; use one of {', '.join(MAMBA_DTYPES)}")
    conv = shape.model_dtype if mamba_cache_dtype == "auto" else mamba_cache_dtype
    if mamba_ssm_cache_dtype != "auto":
        return GdnDtypes(conv, mamba_ssm_cache_dtype, origin)
    hint = shape.mamba_ssm_dtype_hint
    if hint and shape.architecture in QWEN35_SSM_HINT_ARCHS.get(vllm_version, frozenset()):
        return GdnDtypes(conv, str(hint), f"config mamba_ssm_dtype ({shape.architecture})")
    return GdnDtypes(conv, conv, "auto = conv state dtype")
