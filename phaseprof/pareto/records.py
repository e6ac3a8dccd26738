"""The typed records of serving sweeps and ``phaseprof pareto``, defined once here (msgspec Structs).

- ``Percentiles``, ``ServingMetrics``: one decode/concurrency point as a serving benchmark reports it (TTFT,
  TPOT, ITL percentiles; request and token throughput; tokens/s per GPU and per user). The in-process and
  server sweeps write it into each ``sweep.json`` point (``serving`` key); ``pareto`` reads it back.
- ``AsyncScheduling``: what the timed and the profiled engine ran with (vLLM's serving default vs the
  marker-friendly setting) and, when both were timed, both numbers and their ratio (run.json / sweep.json).
- ``ParetoPoint``, ``FrontierPoint``, ``ConfigCapacity``, ``SolFloor``, ``ParetoReport``: ``phaseprof pareto
  --format json`` (schema ``pareto.schema.json``, a test keeps it equal to these records).

This module imports nothing of phaseprof: capture and pareto both depend on it, never the other way round.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

PARETO_SCHEMA_VERSION = 1
PARETO_SCHEMA_PATH = Path(__file__).with_name("pareto.schema.json")

#: What ``tps_per_gpu`` means everywhere (sweep points and the frontier).
TPS_PER_GPU_DEFINITION = ("total tokens/s per GPU: (prompt + output tokens of every request of a round) / "
                          "round wall time (first request sent to last token), median over rounds, / world size")
#: What ``tps_per_user`` means everywhere.
TPS_PER_USER_DEFINITION = "output tokens/s one request sees while decoding: 1000 / median TPOT (ms)"


class Percentiles(msgspec.Struct, frozen=True, kw_only=True):
    """A latency distribution in ms (linear-interpolated percentiles, as numpy's default)."""

    p50_ms: float
    p90_ms: float
    p99_ms: float
    mean_ms: float
    n: int


class ServingMetrics(msgspec.Struct, frozen=True, kw_only=True):
    """One concurrency point: ``concurrency`` requests sent at once per round, ``rounds`` timed rounds.

    - ``ttft``: first token - request sent; ``tpot``: (last token - first token) / (output tokens - 1) per
      request; ``itl``: every gap between consecutive token arrivals of every request (a stream chunk or an
      engine step that carried several tokens counts as one arrival). ``latency_source`` says which clock.
    - ``request_per_s``, ``output_tok_per_s``, ``total_tok_per_s``: per round, requests / output tokens /
      prompt + output tokens over the round's wall time (first request sent to last token); median over rounds.
    - ``world_size``: GPUs (ranks) serving the engine; ``tps_per_gpu`` = total_tok_per_s / world_size,
      ``output_tps_per_gpu`` = output_tok_per_s / world_size; ``tps_per_user`` = 1000 / tpot.p50_ms.
    """

    concurrency: int
    rounds: int
    prompt_tokens: int
    output_tokens: int
    ttft: Percentiles
    tpot: Percentiles
    itl: Percentiles | None
    latency_source: str
    request_per_s: float
    output_tok_per_s: float
    total_tok_per_s: float
    world_size: int
    tps_per_gpu: float
    output_tps_per_gpu: float
    tps_per_user: float


class AsyncScheduling(msgspec.Struct, frozen=True, kw_only=True):
    """vLLM's ``async_scheduling`` in the engine that was timed and in the one that was profiled.

    ``timed`` / ``profiled``: the value the started engine resolved (None: this vLLM has no such setting, or a
    server that does not say). ``refused``: why the serving default could not be used (e.g. the engine
    rejected it on this platform), verbatim. ``marker_timing_ms`` / ``ratio``: when the same point was also
    timed on the marker-friendly engine, its headline median there and marker / serving (2.0 = the
    marker-friendly engine is twice as slow); None when it was not timed both ways. ``vllm_generate_ms`` /
    ``vllm_generate_ratio``: vLLM alone, the same requests through ``vllm.LLM.generate`` on the serving engine,
    and serving / that (1.02 = phaseprof's request driver reports 2% more than vLLM's own loop)."""

    timed: bool | None
    profiled: bool | None
    timed_source: str
    refused: str | None = None
    metric: str | None = None
    serving_timing_ms: float | None = None
    marker_timing_ms: float | None = None
    ratio: float | None = None
    vllm_generate_ms: float | None = None
    vllm_generate_ratio: float | None = None


class SolFloor(msgspec.Struct, frozen=True, kw_only=True):
    """The speed-of-light floor of a decode point: one decode step of ``concurrency`` sequences at their mean
    KV length (prompt + output / 2) on the GPU's ceilings (``sol.sweep.step_floor_ms``: per component the
    larger of FLOPs / peak and bytes / bandwidth; weights, KV cache and recurrent state read at least once).
    ``tps_per_user`` / ``tps_per_gpu``: the point's throughputs had every decode step run at the floor (the
    measured ones scaled by measured TPOT / floor TPOT; prefill and host time kept as measured is not
    modelled: an upper bound). ``pct_of_light`` = floor / measured TPOT x 100."""

    floor_tpot_ms: float
    measured_tpot_ms: float
    pct_of_light: float
    tps_per_user: float
    tps_per_gpu: float
    ceiling: str
    ceiling_source: str


class ConfigCapacity(msgspec.Struct, frozen=True, kw_only=True):
    """The capacity wall of one configuration: how many requests of ``tokens_per_request`` (prompt + output)
    the KV cache holds at once, from the memory plan's block arithmetic (``memory.kv_plan.capacity``: attention
    blocks + GDN state per request) applied to the KV memory vLLM logged; ``max_num_seqs`` caps it too.
    ``vllm_max_concurrency``: vLLM's own "Maximum concurrency for N tokens per request" (N =
    ``vllm_tokens_per_request``) and ``plan_at_vllm_tokens`` ours at that N: the check of the arithmetic."""

    tokens_per_request: int
    kv_cache_gib: float
    kv_max_concurrency: float
    max_num_seqs: int | None
    max_concurrency: int
    vllm_tokens_per_request: int | None = None
    vllm_max_concurrency: float | None = None
    plan_at_vllm_tokens: float | None = None


class ParetoPoint(msgspec.Struct, frozen=True, kw_only=True):
    """One measured point of one configuration. ``breakdown``: the profiled run directory at this point
    (relative to the working directory as given on the command line), None when none was profiled.
    ``dominated_by``: the config and concurrency of a point that beats it on both axes (None: on the
    frontier)."""

    config: str
    concurrency: int
    tps_per_gpu: float
    tps_per_user: float
    output_tps_per_gpu: float
    tpot_p50_ms: float
    ttft_p50_ms: float
    breakdown: str | None
    sweep: str
    over_capacity: bool | None = None
    sol: SolFloor | None = None
    dominated_by: str | None = None


class FrontierPoint(msgspec.Struct, frozen=True, kw_only=True):
    """A non-dominated point: no other point has both more tokens/s per GPU and more tokens/s per user (ties on
    both axes keep the first). Ordered by tokens/s per user, so ``config`` says which configuration wins
    where along the curve."""

    config: str
    concurrency: int
    tps_per_gpu: float
    tps_per_user: float
    breakdown: str | None
    sol: SolFloor | None = None


class ConfigSummary(msgspec.Struct, frozen=True, kw_only=True):
    """One sweep = one configuration: its label and what distinguishes it."""

    config: str
    sweep: str
    model: str | None
    device: str | None
    #: the GPU the sweep ran on (a served sweep's ``device`` is the server's URL) and where that came from
    #: (``pareto.gpu.sweep_gpu``); ``ceiling``: the speed-of-light baseline its floors use, and its source
    gpu: str | None = None
    gpu_source: str | None = None
    ceiling: str | None = None
    ceiling_source: str | None = None
    mode: str | None
    quant: str | None
    world_size: int
    async_scheduling: bool | None
    prompt_tokens: int
    output_tokens: int
    engine_args: dict[str, Any] = msgspec.field(default_factory=dict)
    capacity: ConfigCapacity | None = None
    capacity_note: str | None = None
    sol_note: str | None = None


class Handoff(msgspec.Struct, frozen=True, kw_only=True):
    """What one request hands from the prefill to the decode engine (a MODEL, not a measurement): its
    attention KV blocks (``attention_blocks_per_layer`` x attention layers x ``block_bytes`` per layer, as vLLM
    allocates them: whole blocks) plus every GDN layer's conv and SSM state (unpadded), per GPU of the
    prefill engine; ``transfer_ms`` = ``bytes`` / the link's one-direction bandwidth."""

    prompt_tokens: int
    block_size_tokens: int
    attention_blocks_per_layer: int
    attention_layers: int
    block_bytes: int
    attention_bytes: int
    gdn_layers: int
    conv_bytes_per_layer: int
    ssm_bytes_per_layer: int
    gdn_bytes: int
    bytes: int
    link: str
    link_gb_per_s: float
    link_source: str
    transfer_ms: float


class DisaggPoint(msgspec.Struct, frozen=True, kw_only=True):
    """x prefill instances + y decode instances (x·P + y·D), a MODEL built from a prefill-only and a decode-only
    sweep: requests/s = min(x / prefill TTFT, y x decode concurrency / (output tokens x TPOT), x x link
    bandwidth / handoff bytes) (``bound`` names the limit); ``tps_per_gpu`` = requests/s x (prompt + output
    tokens) / (``prefill_gpus`` + ``decode_gpus``); ``tps_per_user`` = 1000 / decode TPOT p50;
    ``ttft_ms`` = prefill TTFT + ``transfer_ms_per_request`` (queueing not modelled)."""

    config: str
    prefill_instances: int
    decode_instances: int
    prefill_gpus: int
    decode_gpus: int
    decode_concurrency: int
    requests_per_s: float
    tps_per_gpu: float
    tps_per_user: float
    ttft_ms: float
    transfer_ms_per_request: float
    bound: str
    breakdown: str | None = None
    kind: str = "model"


class ParetoReport(msgspec.Struct, frozen=True, kw_only=True):
    """``phaseprof pareto --format json``. ``disaggregated``: with ``--disagg``, the modelled x·P + y·D points,
    ``disagg_frontier`` their frontier, ``handoff`` the per-request transfer they assume."""

    configs: list[ConfigSummary]
    points: list[ParetoPoint]
    frontier: list[FrontierPoint]
    sol_frontier: list[FrontierPoint]
    disaggregated: list[DisaggPoint] = msgspec.field(default_factory=list)
    disagg_frontier: list[DisaggPoint] = msgspec.field(default_factory=list)
    handoff: Handoff | None = None
    disagg_note: str | None = None
    tps_per_gpu_definition: str = TPS_PER_GPU_DEFINITION
    tps_per_user_definition: str = TPS_PER_USER_DEFINITION
    kind: str = "pareto"
    schema_version: int = PARETO_SCHEMA_VERSION


def to_builtins(obj: Any) -> Any:
    """A record as plain JSON-ready values."""
    return msgspec.to_builtins(obj)


def pareto_schema() -> dict[str, Any]:
    """JSON Schema (2020-12) of ``ParetoReport`` (the committed ``pareto.schema.json``)."""
    doc = msgspec.json.schema(ParetoReport)
    doc["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return doc
