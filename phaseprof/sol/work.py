"""The work of one engine step: FLOPs and bytes moved per model component, from the config and token counts.

Every function returns the whole model's work for one step (all layers of its kind, no tensor parallelism).
FLOPs count a multiply-add as 2. Bytes are the minimum HBM traffic of the operation as written: weights read
once per step, activations read and written once, KV cache / recurrent state read and written; no re-reads
from tiling and no intermediate tensors an implementation may choose to spill (e.g. FLA's per-chunk GDN
states), so the floor they give is a true lower bound. Each component lands in the kernel-view bucket
where vLLM's kernels for it are classified (``COMPONENT_BUCKET``).

Assumptions stated once:
- MoE routing is uniform and independent (what dummy weights give): with ``b`` tokens each choosing ``k`` of
  ``E`` experts, the expected number of distinct experts touched is ``E·(1 − (1 − k/E)^b)``; their weights are
  read once. vLLM's ``--enable-mfu-metrics`` (``vllm/v1/metrics/perf.py``) assumes ``min(b·k, E)`` instead.
- Prefill requests start from an empty cache (no prefix hits, no earlier chunk), so causal attention covers
  ``n(n+1)/2`` query-key pairs per sequence; decode sequences attend over ``kv_len`` cached tokens.
- Only the last token of each prefill request and every decode token get logits (vLLM's sampler positions).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from phaseprof.classify.buckets import Bucket
from phaseprof.sol.model import SolModel

#: FLA's chunk size for the chunked gated delta rule (``chunk_gated_delta_rule``, BT = 64).
GDN_CHUNK = 64


@dataclass(frozen=True)
class Work:
    """FLOPs and bytes of HBM traffic."""

    flops: float = 0.0
    bytes: float = 0.0

    def __add__(self, other: Work) -> Work:
        return Work(self.flops + other.flops, self.bytes + other.bytes)

    def scaled(self, k: float) -> Work:
        return Work(self.flops * k, self.bytes * k)


ZERO = Work()


@dataclass(frozen=True)
class StepTokens:
    """One step's batch. ``prefill_lens``: new tokens of each prefill request (no cached prefix assumed);
    ``decode_kv_lens``: for each decode request, the tokens in its KV cache/state including the new one;
    ``experts_touched``: measured routing, the distinct experts each MoE layer read (None = assume uniform)."""

    prefill_lens: tuple[int, ...] = ()
    decode_kv_lens: tuple[int, ...] = ()
    experts_touched: tuple[int, ...] | None = None

    @property
    def tokens(self) -> int:
        """Tokens the step runs through the model (prefill tokens + one per decode request)."""
        return sum(self.prefill_lens) + len(self.decode_kv_lens)

    @property
    def sequences(self) -> int:
        return len(self.prefill_lens) + len(self.decode_kv_lens)


class Component(StrEnum):
    ROUTER = "router"
    ROUTED_EXPERTS = "routed_experts"
    SHARED_EXPERT = "shared_expert"
    DENSE_MLP = "dense_mlp"
    ATTN_PROJ = "attn_proj"  # QKV (+ output gate) and O projections, or MLA's five
    GDN_PROJ = "gdn_proj"  # GDN in_proj (qkvz + ba) and out_proj
    LM_HEAD = "lm_head"
    ATTENTION = "attention"  # causal prefill / decode KV reads + KV cache writes
    GDN = "gdn"  # chunked prefill / recurrent decode, state read/write
    GDN_CONV = "gdn_conv"
    NORM = "norm"
    ELEMENTWISE = "elementwise"


COMPONENT_BUCKET: dict[Component, Bucket] = {
    Component.ROUTER: Bucket.GEMM, Component.ROUTED_EXPERTS: Bucket.MOE, Component.SHARED_EXPERT: Bucket.GEMM,
    Component.DENSE_MLP: Bucket.GEMM, Component.ATTN_PROJ: Bucket.GEMM, Component.GDN_PROJ: Bucket.GEMM,
    Component.LM_HEAD: Bucket.GEMM, Component.ATTENTION: Bucket.ATTENTION, Component.GDN: Bucket.GDN,
    Component.GDN_CONV: Bucket.GDN, Component.NORM: Bucket.NORM, Component.ELEMENTWISE: Bucket.ELEMENTWISE,
}


#: Components that stay in the model dtype under quantization: vLLM builds the MoE router (``gate``) with
#: ``quant_config=None`` (Qwen2/3-MoE, Qwen3-Next), and the lm_head is a ``ParallelLMHead`` (an embedding, not a
#: ``LinearBase``), which FP8/AWQ/GPTQ leave alone. Their weights are read at ``act_bytes`` and their FLOPs run at
#: the BF16 peak.
UNQUANTIZED = frozenset({Component.ROUTER, Component.LM_HEAD})


def precision(m: SolModel, component: Component) -> str:
    """The peak a component's GEMMs can reach: the model's quantized ``compute``, or BF16 where unquantized."""
    return "bf16" if component in UNQUANTIZED else m.compute


def linear(tokens: float, d_in: int, d_out: int, *, weight_bytes: float, act_bytes: float) -> Work:
    """One ``tokens × d_in`` by ``d_in × d_out`` GEMM: weights read once, input read, output written."""
    return Work(2.0 * tokens * d_in * d_out, d_in * d_out * weight_bytes + tokens * (d_in + d_out) * act_bytes)


def _lin(m: SolModel, tokens: float, d_in: int, d_out: int, *, quantized: bool = True) -> Work:
    w = m.weight_bytes if quantized else m.act_bytes
    return linear(tokens, d_in, d_out, weight_bytes=w, act_bytes=m.act_bytes) if tokens else ZERO


def distinct_experts(num_experts: int, top_k: int, tokens: int) -> float:
    """Expected distinct experts hit by ``tokens`` tokens choosing ``top_k`` of ``num_experts`` uniformly."""
    if not num_experts or not tokens:
        return 0.0
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** tokens)


# ---------------------------------------------------------------------------------------------- MoE / MLP
def router(m: SolModel, t: StepTokens) -> Work:
    """The gate GEMM ``hidden → num_experts`` of every MoE layer (top-k selection itself is negligible)."""
    return _lin(m, t.tokens, m.hidden, m.num_experts, quantized=False).scaled(m.moe_layers)


def routed_experts(m: SolModel, t: StepTokens) -> Work:
    """Top-k experts' gate_up (``hidden → 2·I``) and down (``I → hidden``) GEMMs over ``tokens·k`` rows.
    Bytes: the distinct experts' weights once (measured per layer when ``t.experts_touched`` is given, else the
    uniform expectation); the tokens' hidden states read once (the kernel gathers rows by index), the
    ``tokens·k`` rows of gate_up output written, of down input read and of down output written."""
    b, k, h, i = t.tokens, m.top_k, m.hidden, m.moe_intermediate
    if not (b and m.moe_layers):
        return ZERO
    rows = b * k
    flops = 2.0 * rows * (h * 2 * i + i * h)
    acts = (b * h + rows * (2 * i + i + h)) * m.act_bytes
    expert = 3 * h * i * m.expert_weight_bytes
    if t.experts_touched is not None:
        return Work(flops * m.moe_layers, sum(t.experts_touched) * expert + acts * m.moe_layers)
    weights = distinct_experts(m.num_experts, k, b) * expert
    return Work(flops, weights + acts).scaled(m.moe_layers)


def moe_layer(m: SolModel, tokens: int, experts: float) -> Work:
    """One MoE layer's routed experts for ``tokens`` tokens reading ``experts`` distinct experts' weights."""
    rows = tokens * m.top_k
    h, i = m.hidden, m.moe_intermediate
    flops = 2.0 * rows * (h * 2 * i + i * h)
    acts = (tokens * h + rows * (2 * i + i + h)) * m.act_bytes
    return Work(flops, experts * 3 * h * i * m.expert_weight_bytes + acts)


def shared_expert(m: SolModel, t: StepTokens) -> Work:
    """Shared expert gate_up + down (every token), plus Qwen's ``hidden → 1`` sigmoid gate."""
    s = m.shared_intermediate
    if not (s and m.moe_layers):
        return ZERO
    w = _lin(m, t.tokens, m.hidden, 2 * s) + _lin(m, t.tokens, s, m.hidden)
    if m.shared_gate:  # built with quant_config=None, like the router
        w = w + _lin(m, t.tokens, m.hidden, 1, quantized=False)
    return w.scaled(m.moe_layers)


def dense_mlp(m: SolModel, t: StepTokens) -> Work:
    """SwiGLU MLP of the dense layers: gate_up ``hidden → 2·I`` and down ``I → hidden``."""
    if not m.dense_layers:
        return ZERO
    i = m.intermediate_size
    return (_lin(m, t.tokens, m.hidden, 2 * i) + _lin(m, t.tokens, i, m.hidden)).scaled(m.dense_layers)


# ------------------------------------------------------------------------------------------ projections
def attn_proj(m: SolModel, t: StepTokens) -> Work:
    """QKV (+ Qwen3-Next's output gate, as wide as q) and O projections; MLA: q_a, q_b, kv_a, kv_b, o."""
    n, h = t.tokens, m.hidden
    if m.mla is not None:
        a = m.mla
        qk = a.qk_nope_head_dim + a.qk_rope_head_dim
        q = (_lin(m, n, h, a.q_lora_rank) + _lin(m, n, a.q_lora_rank, m.heads * qk)) if a.q_lora_rank \
            else _lin(m, n, h, m.heads * qk)
        kv = _lin(m, n, h, a.kv_lora_rank + a.qk_rope_head_dim) + \
            _lin(m, n, a.kv_lora_rank, m.heads * (a.qk_nope_head_dim + a.v_head_dim))
        return (q + kv + _lin(m, n, m.heads * a.v_head_dim, h)).scaled(m.attention_layers)
    q_out = m.heads * m.head_dim * (2 if m.attn_output_gate else 1)
    qkv = _lin(m, n, h, q_out + 2 * m.kv_heads * m.head_dim)
    return (qkv + _lin(m, n, m.heads * m.head_dim, h)).scaled(m.attention_layers)


def gdn_proj(m: SolModel, t: StepTokens) -> Work:
    """GDN ``in_proj_qkvz`` (``hidden → 2·Hk·dk + 2·Hv·dv``), ``in_proj_ba`` (``hidden → 2·Hv``), ``out_proj``."""
    g = m.gdn
    if g is None or not m.gdn_layers:
        return ZERO
    n, h = t.tokens, m.hidden
    qkvz = 2 * g.num_key_heads * g.key_head_dim + 2 * g.num_value_heads * g.value_head_dim
    w = _lin(m, n, h, qkvz) + _lin(m, n, h, 2 * g.num_value_heads) + \
        _lin(m, n, g.num_value_heads * g.value_head_dim, h)
    return w.scaled(m.gdn_layers)


def lm_head(m: SolModel, t: StepTokens) -> Work:
    """``hidden → vocab`` for the sampled positions: one per prefill request, one per decode request."""
    return _lin(m, t.sequences, m.hidden, m.vocab, quantized=False)


# ----------------------------------------------------------------------------------- attention and GDN
def _pairs(n: int, past: int, window: int | None) -> float:
    """Query-key pairs of ``n`` new tokens after ``past`` cached ones, causal, within a sliding window."""
    full = n * past + n * (n + 1) / 2
    if window is None:
        return float(full)
    # token j (1-based, at position past + j) sees min(past + j, window) keys
    over = max(0, past + n - window)  # tokens whose view is capped
    capped = min(n, over)
    uncapped = n - capped
    return float(capped * window + uncapped * past + uncapped * (uncapped + 1) / 2)


def attention(m: SolModel, t: StepTokens) -> Work:
    """Scaled-dot-product attention per attention layer. FLOPs: ``2·heads·(d_qk + d_v)`` per causal
    query-key pair. Bytes: prefill reads Q, K, V and writes O and the new K/V into the cache; decode reads
    each sequence's cached K/V (``kv_len`` tokens) and Q, writes O and the new K/V. MLA decode works on the
    compressed latent (``kv_lora_rank + rope`` per token, shared by all heads, absorbed weights)."""
    if not m.attention_layers:
        return ZERO
    a = m.mla
    if a is not None:
        pre_qk, pre_v, pre_kvh = a.qk_nope_head_dim + a.qk_rope_head_dim, a.v_head_dim, m.heads
        dec_qk, dec_v, cache_tok = a.kv_lora_rank + a.qk_rope_head_dim, a.kv_lora_rank, \
            a.kv_lora_rank + a.qk_rope_head_dim
    else:
        pre_qk = pre_v = dec_qk = dec_v = m.head_dim
        pre_kvh = m.kv_heads
        cache_tok = 2 * m.kv_heads * m.head_dim
    total = ZERO
    for window in m.attention_windows:
        for n in t.prefill_lens:
            flops = 2.0 * m.heads * (pre_qk + pre_v) * _pairs(n, 0, window)
            acts = n * (m.heads * pre_qk + pre_kvh * (pre_qk + pre_v) + m.heads * pre_v) * m.act_bytes
            total = total + Work(flops, acts + n * cache_tok * m.kv_bytes)
        for kv in t.decode_kv_lens:
            keys = min(kv, window) if window else kv
            flops = 2.0 * m.heads * (dec_qk + dec_v) * keys
            acts = m.heads * (dec_qk + dec_v) * m.act_bytes
            total = total + Work(flops, acts + (keys + 1) * cache_tok * m.kv_bytes)
    return total


def gdn(m: SolModel, t: StepTokens) -> Work:
    """Gated DeltaNet core per GDN layer, per value head (q/k heads are shared across value heads).

    Prefill (FLA chunked form, chunk ``c`` = min(64, n)) per token: ``K·Kᵀ``, ``A·k``, ``Q·Kᵀ`` (3 × 2·c·dk),
    ``A·v`` and ``P·v`` (2 × 2·c·dv), ``w·S``, ``Kᵀ·v`` and ``q·S`` (3 × 2·dk·dv), the triangular inverse
    (2/3·c²). Decode (recurrent) per token: decay, ``S·k``, rank-1 update, ``q·S``: 7·dk·dv.
    Bytes: q, k, v, gates in, o out, and each sequence's recurrent state (Hv·dk·dv) read and written."""
    g = m.gdn
    if g is None or not m.gdn_layers:
        return ZERO
    hv, dk, dv = g.num_value_heads, g.key_head_dim, g.value_head_dim
    per_tok_bytes = (2 * g.num_key_heads * dk + 2 * hv * dv + 2 * hv) * m.act_bytes
    state = hv * dk * dv * m.state_bytes
    total = ZERO
    for n in t.prefill_lens:
        c = min(GDN_CHUNK, n)
        per_tok = 6 * c * dk + 4 * c * dv + 6 * dk * dv + 2 * c * c / 3
        total = total + Work(float(n * hv * per_tok), n * per_tok_bytes + 2 * state)
    d = len(t.decode_kv_lens)
    total = total + Work(float(d * hv * 7 * dk * dv), d * (per_tok_bytes + 2 * state))
    return total.scaled(m.gdn_layers)


def gdn_conv(m: SolModel, t: StepTokens) -> Work:
    """Causal depthwise conv1d over q, k, v channels (``conv_dim``, kernel K): 2·K FLOPs per channel and
    token; bytes: channels read and written per token, each sequence's ``(K−1)·conv_dim`` state read + written."""
    g = m.gdn
    if g is None or not m.gdn_layers:
        return ZERO
    n = t.tokens
    flops = 2.0 * g.conv_kernel * g.conv_dim * n
    nbytes = (2 * n * g.conv_dim + 2 * t.sequences * (g.conv_kernel - 1) * g.conv_dim) * m.act_bytes
    return Work(flops, nbytes).scaled(m.gdn_layers)


# ------------------------------------------------------------------------------- norms and elementwise
def norm(m: SolModel, t: StepTokens) -> Work:
    """Bytes only. Two fused add+RMSNorms per layer plus the final one, each reading the hidden state and the
    residual and writing both (4 × hidden), except the first layer's input norm: no residual yet (vLLM's
    ``if residual is None``), so it reads the embeddings and writes the normed state (2 × hidden); GDN's gated
    RMSNorm (reads o and z, writes o). Qwen3's per-head q/k norms are not here: they touch the same q and k as
    RoPE, so their minimum traffic is RoPE's (``elementwise``); under torch.compile the two run fused, in
    kernels named ``triton_red_fused_N`` / ``triton_poi_fused_N``, classified elementwise."""
    n = t.tokens
    nbytes = ((2 * m.num_layers + 1) * 4 - 2) * n * m.hidden
    if m.gdn is not None:
        nbytes += m.gdn_layers * 3 * n * m.gdn.num_value_heads * m.gdn.value_head_dim
    return Work(0.0, nbytes * m.act_bytes)


def elementwise(m: SolModel, t: StepTokens) -> Work:
    """Bytes only: SiLU-and-mul of every MLP (reads 2·I, writes I per row; routed experts on ``tokens·k``
    rows), the MoE top-k sum (reads k·hidden, writes hidden), the shared-expert gate multiply-add, RoPE with
    Qwen3's q/k norms (reads and writes q and k once: the minimum for both, see ``norm``), the attention output
    gate, and the embedding lookup."""
    n = t.tokens
    b = n * m.top_k * 3 * m.moe_intermediate * m.moe_layers
    b += n * (m.top_k + 1) * m.hidden * m.moe_layers if m.moe_layers else 0
    b += n * 3 * m.shared_intermediate * m.moe_layers
    b += n * 3 * m.hidden * m.moe_layers if m.shared_intermediate else 0
    b += n * 3 * m.intermediate_size * m.dense_layers
    if m.mla is None:
        b += m.attention_layers * 2 * n * (m.heads + m.kv_heads) * m.head_dim
        b += m.attention_layers * 3 * n * m.heads * m.head_dim if m.attn_output_gate else 0
    b += 2 * n * m.hidden
    return Work(0.0, b * m.act_bytes)


COMPONENTS = {
    Component.ROUTER: router, Component.ROUTED_EXPERTS: routed_experts, Component.SHARED_EXPERT: shared_expert,
    Component.DENSE_MLP: dense_mlp, Component.ATTN_PROJ: attn_proj, Component.GDN_PROJ: gdn_proj,
    Component.LM_HEAD: lm_head, Component.ATTENTION: attention, Component.GDN: gdn, Component.GDN_CONV: gdn_conv,
    Component.NORM: norm, Component.ELEMENTWISE: elementwise,
}


def step_work(m: SolModel, t: StepTokens) -> dict[Component, Work]:
    """Every component's work for one step (components with no work are left out)."""
    out = {c: f(m, t) for c, f in COMPONENTS.items()}
    return {c: w for c, w in out.items() if w.flops or w.bytes}
