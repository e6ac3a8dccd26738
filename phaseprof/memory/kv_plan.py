"""vLLM's unified KV-cache block for hybrid attention/GDN models, computed exactly as vLLM computes it.

Sources (identical in vLLM 0.23.0 and 0.28.0 unless stated):
- ``Platform._align_hybrid_block_size`` (vllm/platforms/interface.py): attention page for one token, mamba page,
  ``attn_block_size = align * cdiv(mamba_page, align * attn_page_1_token)`` with
  ``align = max(min kernel block size, cache_config.block_size)``, then the mamba page is padded up to
  ``block_size * attn_page_1_token`` and the padding logged in percent.
- ``FullAttentionSpec.page_size_bytes`` = 2 (K and V) * block * kv_heads * head_dim * dtype bytes;
  ``MambaSpec.page_size_bytes`` = sum(prod(shape) * dtype bytes) (vllm/v1/kv_cache_interface.py).
- ``MambaStateShapeCalculator.gated_delta_net_state_shape`` (mamba_utils.py): conv state
  (conv_dim / tp, kernel - 1 + spec tokens), SSM state (value heads / tp, value dim, key dim).
- ``_get_kv_cache_groups_uniform_page_size`` (vllm/v1/core/kv_cache_utils.py): layers are split into groups of
  equal size; each of ``group_size`` pool tensors holds one layer of every group, so one pool block costs
  ``page * group_size`` bytes; a request takes blocks from every group.
All numbers are per GPU (tensor-parallel rank).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from phaseprof.errors import PhaseprofError
from phaseprof.memory.defaults import DEFAULT_BLOCK_SIZE_TOKENS, KERNEL_BLOCK_ALIGNMENT_TOKENS, VLLM_VERSIONS
from phaseprof.memory.dtypes import GdnDtypes, dtype_bytes, resolve_gdn_dtypes, resolve_kv_dtype
from phaseprof.memory.model_shape import ModelShape


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class CacheSettings:
    """The vLLM options that change the KV-cache layout (vLLM's own flag names, defaults as vLLM's)."""

    vllm_version: str = "0.23"
    kv_cache_dtype: str = "auto"
    mamba_cache_dtype: str = "auto"
    mamba_ssm_cache_dtype: str = "auto"
    tensor_parallel_size: int = 1
    enable_prefix_caching: bool = True
    block_size: int | None = None
    num_speculative_tokens: int = 0
    #: where an explicit ``mamba_ssm_cache_dtype`` came from: the flag, or the preset that runs with it
    ssm_dtype_origin: str = "--mamba-ssm-dtype"


@dataclass(frozen=True)
class GdnState:
    """One GDN layer's recurrent state for one request (per GPU): conv and SSM tensors."""

    conv_shape: tuple[int, int]
    conv_dtype: str
    conv_bytes: int
    ssm_shape: tuple[int, int, int]
    ssm_dtype: str
    ssm_dtype_source: str
    ssm_bytes: int

    @property
    def state_bytes(self) -> int:
        """Unpadded ``MambaSpec.page_size_bytes``: conv + SSM state of one layer for one request."""
        return self.conv_bytes + self.ssm_bytes


@dataclass(frozen=True)
class KvLayout:
    """The unified block and the pool layout. ``page_bytes`` is one layer's share of one block."""

    kv_dtype: str
    attn_bytes_per_token_per_layer: int
    gdn: GdnState | None
    kernel_alignment_tokens: int
    block_size_tokens: int
    page_bytes: int
    mamba_padding_bytes: int
    mamba_padding_pct: float
    mamba_cache_mode: str
    gdn_blocks_per_request_per_layer: int
    num_attention_layers: int
    num_gdn_layers: int
    group_size_layers: int
    attention_groups: int
    gdn_groups: int
    padding_layers: int
    predicted_log_lines: tuple[str, ...]

    @property
    def pool_block_bytes(self) -> int:
        """Bytes one pool block occupies across the ``group_size`` shared tensors (vLLM's ``num_blocks`` unit)."""
        return self.page_bytes * self.group_size_layers

    @property
    def attention_block_bytes_all_layers(self) -> int:
        """One block's tokens across every attention layer (seed 000's '~22 MB per block')."""
        return self.page_bytes * self.num_attention_layers


@dataclass(frozen=True)
class RequestCost:
    """What one request of ``tokens`` tokens holds. Layer-blocks count one block in one layer (seed 004's
    arithmetic); pool blocks are vLLM's unit (one block id across a whole group)."""

    tokens: int
    attention_blocks_per_layer: int
    attention_layer_blocks: int
    gdn_layer_blocks: int
    attention_bytes: int
    gdn_bytes: int
    pool_blocks: int
    pool_bytes: int
    unused_attention_tokens: int
    fragmentation_bytes: int
    fragmentation_pct: float

    @property
    def layer_blocks(self) -> int:
        return self.attention_layer_blocks + self.gdn_layer_blocks


def _gdn_state(shape: ModelShape, s: CacheSettings, dtypes: GdnDtypes) -> GdnState:
    g = shape.gdn
    assert g is not None
    tp = s.tensor_parallel_size
    for what, n in (("linear_num_value_heads", g.num_value_heads), ("GDN conv channels", g.conv_dim)):
        if n % tp:
            raise PhaseprofError(f"--tp {tp} does not divide {what} ({n}); vLLM shards GDN state evenly")
    conv_shape = (g.conv_dim // tp, g.conv_kernel - 1 + s.num_speculative_tokens)
    ssm_shape = (g.num_value_heads // tp, g.value_head_dim, g.key_head_dim)
    return GdnState(conv_shape, dtypes.conv_dtype, prod(conv_shape) * dtype_bytes(dtypes.conv_dtype), ssm_shape,
                    dtypes.ssm_dtype, dtypes.ssm_dtype_source, prod(ssm_shape) * dtype_bytes(dtypes.ssm_dtype))


def _groups(n_attn: int, n_gdn: int) -> tuple[int, int, int, int]:
    """(group_size, attention groups, gdn groups, padding layers) as ``_get_kv_cache_groups_uniform_page_size``."""
    counts = [n for n in (n_attn, n_gdn) if n > 0]
    if len(counts) == 1:
        return counts[0], int(n_attn > 0), int(n_gdn > 0), 0
    lo, hi = min(counts), max(counts)
    size = hi if hi < lo * 1.5 else lo
    a, g = cdiv(n_attn, size), cdiv(n_gdn, size)
    return size, a, g, (a + g) * size - n_attn - n_gdn


def kv_layout(shape: ModelShape, s: CacheSettings) -> KvLayout:
    """The block vLLM settles on for ``shape`` under settings ``s`` and the log lines it prints about it."""
    if s.vllm_version not in VLLM_VERSIONS:
        raise PhaseprofError(
            f"--vllm-version {s.vllm_version!r} is not modelled; use one of {', '.join(VLLM_VERSIONS)}")
    for flag, v in (("--tp", s.tensor_parallel_size), ("--block-size", s.block_size)):
        if v is not None and v <= 0:
            raise PhaseprofError(f"{flag} must be a positive integer, got {v}")
    if s.num_speculative_tokens < 0:
        raise PhaseprofError(f"--num-speculative-tokens must be >= 0, got {s.num_speculative_tokens}")
    if shape.num_attention_layers == 0:
        raise PhaseprofError("model has no attention layers; attention-free models are not modelled")
    kv_dtype = resolve_kv_dtype(s.kv_cache_dtype, shape.model_dtype)
    kv_heads = max(1, shape.num_kv_heads // s.tensor_parallel_size)  # ModelConfig.get_num_kv_heads
    attn_1 = 2 * kv_heads * shape.head_dim * dtype_bytes(kv_dtype)
    block = s.block_size or DEFAULT_BLOCK_SIZE_TOKENS
    align = max(KERNEL_BLOCK_ALIGNMENT_TOKENS, block)
    gdn, lines, pad_bytes, pad_pct = None, [], 0, 0.0
    mode, gdn_blocks = "none", 0
    if shape.gdn is not None and shape.num_gdn_layers:
        dtypes = resolve_gdn_dtypes(shape, mamba_cache_dtype=s.mamba_cache_dtype,
                                    mamba_ssm_cache_dtype=s.mamba_ssm_cache_dtype, vllm_version=s.vllm_version,
                                    origin=s.ssm_dtype_origin)
        gdn = _gdn_state(shape, s, dtypes)
        mamba_page = gdn.state_bytes
        # GDN models do not support mamba prefix-caching mode "all", so both versions pick "align".
        mode = "align" if s.enable_prefix_caching else "none"
        gdn_blocks = (2 if mode == "align" else 1) + s.num_speculative_tokens  # MambaSpec.max_memory_usage_bytes
        attn_block = align * cdiv(mamba_page, align * attn_1)
        if block < attn_block:
            block = attn_block
            lines.append(f"Setting attention block size to {block} tokens to ensure that attention page size "
                         "is >= mamba page size.")
        pad_bytes = block * attn_1 - mamba_page
        if pad_bytes:
            pad_pct = 100 * pad_bytes / mamba_page
            lines.append(f"Padding mamba page size by {pad_pct:.2f}% to ensure that mamba page size and "
                         "attention page size are exactly equal.")
    size, a_groups, g_groups, padding = _groups(shape.num_attention_layers, shape.num_gdn_layers if gdn else 0)
    return KvLayout(kv_dtype, attn_1, gdn, align, block, block * attn_1, pad_bytes, pad_pct, mode, gdn_blocks,
                    shape.num_attention_layers, shape.num_gdn_layers if gdn else 0, size, a_groups, g_groups,
                    padding, tuple(lines))


def request_cost(layout: KvLayout, tokens: int) -> RequestCost:
    """Blocks and bytes one request of ``tokens`` tokens holds, and what rounding to whole blocks wastes.

    Fragmentation = pool bytes held minus the bytes the tokens and GDN states strictly need: the unused tail of
    the last attention block in every attention layer, the mamba page padding, and any group padding layers."""
    if tokens <= 0:
        raise PhaseprofError(f"--tokens must be a positive integer, got {tokens}")
    L = layout
    per_layer = cdiv(tokens, L.block_size_tokens)
    attn_lb = per_layer * L.num_attention_layers
    gdn_lb = L.gdn_blocks_per_request_per_layer * L.num_gdn_layers
    pool_blocks = L.attention_groups * per_layer + L.gdn_groups * L.gdn_blocks_per_request_per_layer
    pool_bytes = pool_blocks * L.pool_block_bytes
    state = L.gdn.state_bytes if L.gdn else 0
    needed = tokens * L.attn_bytes_per_token_per_layer * L.num_attention_layers + state * gdn_lb
    frag = pool_bytes - needed
    return RequestCost(tokens, per_layer, attn_lb, gdn_lb, attn_lb * L.page_bytes, gdn_lb * L.page_bytes,
                       pool_blocks, pool_bytes, per_layer * L.block_size_tokens - tokens, frag,
                       100 * frag / pool_bytes)


@dataclass(frozen=True)
class Capacity:
    """What a KV budget holds, as vLLM reports it at startup ("GPU KV cache size: N tokens", "Maximum
    concurrency for M tokens per request: X x")."""

    kv_cache_bytes: int
    num_blocks: int
    max_model_len: int
    pool_blocks_per_request: int
    max_concurrency: float
    kv_cache_tokens: int


def capacity(layout: KvLayout, *, kv_cache_bytes: int, max_model_len: int) -> Capacity:
    """``get_num_blocks`` then ``get_max_concurrency_for_kv_cache_config``; tokens = int(concurrency * len).
    0.23 computes cdiv(sum of per-group bytes, page) and 0.28 the sum of per-group cdivs: equal here,
    because every attention and mamba group's bytes are whole pages."""
    if max_model_len <= 0:
        raise PhaseprofError(f"--max-model-len must be a positive integer, got {max_model_len}")
    num_blocks = max(0, kv_cache_bytes // layout.page_bytes // layout.group_size_layers)
    per_req = request_cost(layout, max_model_len).pool_blocks
    conc = num_blocks / per_req
    return Capacity(kv_cache_bytes, num_blocks, max_model_len, per_req, conc, int(conc * max_model_len))
