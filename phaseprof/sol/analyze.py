"""Breakdown + model config + ceiling → the ``sol`` section (see ``analysis.sol_results`` for the definitions).

Token counts per step come from the step markers (the step's label); decode KV lengths are followed through
the trace: a sequence enters with its prefill length (or the capture's ``prompt_tokens`` when the trace holds
no prefill) and grows by one token per decode step.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from phaseprof.analysis.results import Breakdown, StepRow
from phaseprof.records import RunRecord
from phaseprof.routing import Routing
from phaseprof.sol.ceilings import Ceiling
from phaseprof.sol.imbalance import floor_us, moe_layers
from phaseprof.sol.model import SolModel
from phaseprof.analysis.sol_results import SolBucket, SolCeiling, SolPhase, SolSection, SolStep
from phaseprof.sol.work import COMPONENT_BUCKET, StepTokens, Work, precision, step_work
from phaseprof.trace.markers import parse_step_marker

NEEDS_CONFIG = "needs --model-config"
#: The MoE floor's routing input, when no routing was recorded (foreign traces, captures before routing.npz).
ROUTING_ASSUMED = "MoE routing uniform (assumed): distinct experts per step = E*(1-(1-k/E)^tokens), weights read once"
ROUTING_MEASURED = "MoE routing measured (routing.npz): each layer reads the weights of the experts it touched"
#: What a bucket faster than its floor means when none of its inputs was assumed.
MODEL_BUG = "work model or ceiling: every input was measured, so the floor is wrong (a bug to report)"
#: What a bucket at most MEASURED_MARGIN_PCT % of light means against a measured ceiling, nothing assumed.
MEASURED_MARGIN = ("within 2% of a measured ceiling: the ceiling is itself a measurement (the best of its runs), "
                   "so a kernel can meet or just pass it")
MEASURED_MARGIN_PCT = 102.0
ASSUMPTIONS = [
    ROUTING_ASSUMED,
    "prefill requests start from an empty KV cache; prefill tokens split evenly over a step's requests",
    "bytes = minimum HBM traffic (weights once, activations in/out once, KV/state); no tiling re-reads",
    "norm and elementwise work is bytes only; a component's floor = max(FLOPs/peak, bytes/bandwidth)",
]


def _split(total: int, parts: int) -> tuple[int, ...]:
    base, extra = divmod(total, parts)
    return tuple(base + (1 if i < extra else 0) for i in range(parts))


def step_tokens(steps: list[StepRow], capture: RunRecord | None,
                routing: Mapping[int, tuple[int, tuple[int, ...]]] | None = None,
                ) -> tuple[list[StepTokens | None], list[str]]:
    """Each step's batch from its marker; None for steps whose marker carries no token counts. ``routing``:
    marker step index -> (tokens, distinct experts per MoE layer) measured by the capture; a step gets its
    ``experts_touched`` when the recorded tokens equal the marker's."""
    notes: list[str] = []
    routing = routing or {}
    mismatched = 0
    seq_len: float | None = None
    out: list[StepTokens | None] = []
    for row in sorted(steps, key=lambda r: r.index):
        m = parse_step_marker(row.label)
        if m is None or m.context_tokens is None or m.generation_tokens is None:
            out.append(None)
            continue
        cr = m.context_requests or (1 if m.context_tokens else 0)
        gr = m.generation_requests or m.generation_tokens
        prefill = _split(m.context_tokens, cr) if m.context_tokens else ()
        decode: tuple[int, ...] = ()
        if gr:
            if seq_len is None:
                seq_len = float((capture.request.prompt_tokens if capture else None) or 0)
                notes.append(f"decode KV length starts at {seq_len:g} tokens "
                             + ("(capture's prompt_tokens)" if seq_len else "(unknown: no prefill in the trace)"))
            decode = (int(round(seq_len)) + 1,) * gr
            seq_len += 1
        if prefill:
            seq_len = float(sum(prefill)) / len(prefill)
        touched = None
        if m.index is not None and m.index in routing:
            n, experts = routing[m.index]
            if n == sum(prefill) + len(decode):
                touched = experts
            else:
                mismatched += 1
        out.append(StepTokens(prefill, decode, touched))
    if mismatched:
        notes.append(f"{mismatched} step(s) recorded routing for a different token count than their marker: "
                     "uniform routing assumed there")
    return out, notes


def _pct(floor: float, measured: float) -> float | None:
    return 100.0 * floor / measured if measured > 0 else None


@dataclass
class _BucketSum:
    """Running sums of one bucket over a phase's steps (internal, mutable while summing)."""

    work: Work = field(default_factory=Work)
    floor_us: float = 0.0
    compute_floor_us: float = 0.0  # the part of the floor from compute-bound components
    components: dict[str, float] = field(default_factory=dict)  # component -> floor_us

    def add(self, component: str, w: Work, floor_us: float, compute_bound: bool) -> None:
        self.work += w
        self.floor_us += floor_us
        self.compute_floor_us += floor_us if compute_bound else 0.0
        self.components[component] = self.components.get(component, 0.0) + floor_us

    def result(self, bucket: str, time_us: float) -> SolBucket:
        w, t = self.work, time_us
        return SolBucket(
            bucket=bucket, flops=w.flops, bytes=w.bytes, time_us=t,
            intensity_flop_per_byte=w.flops / w.bytes if w.bytes else 0.0,
            bound="compute" if self.floor_us and 2 * self.compute_floor_us >= self.floor_us else "memory",
            achieved_tflops=w.flops / (t * 1e6) if t else 0.0, achieved_tbps=w.bytes / (t * 1e6) if t else 0.0,
            floor_us=self.floor_us, pct_of_light=_pct(self.floor_us, t), components=dict(self.components))


def _judged(b: SolBucket, assumed: list[str], *, measured_ceiling: bool) -> SolBucket:
    """``b`` with the inputs its floor assumed, and — when it ran faster than its floor — the assumption that
    broke (``MEASURED_MARGIN`` within 2% of a measured ceiling, ``MODEL_BUG`` beyond, when nothing was
    assumed): a point above a roof is never left unexplained."""
    beats = None
    if b.pct_of_light is not None and b.pct_of_light > 100:
        if assumed:
            beats = "; ".join(assumed)
        else:
            beats = MEASURED_MARGIN if measured_ceiling and b.pct_of_light <= MEASURED_MARGIN_PCT else MODEL_BUG
    return replace(b, assumed=list(assumed), beats_floor=beats)


def _phase_notes(phase: str, buckets: list[SolBucket]) -> list[str]:
    notes = []
    unseen = [b.bucket for b in buckets if not b.time_us]
    if unseen:
        # Short enough for one line at 80 columns: e.g. unfused norms run as elementwise kernels.
        notes.append(f"{phase}: {', '.join(unseen)} has no kernels of its own (they ran in another bucket)")
    for b in buckets:
        if b.beats_floor:
            notes.append(f"{phase}: {b.bucket} ran faster than its floor ({b.pct_of_light:.0f}% of light): "
                         f"assumption broken: {b.beats_floor}")
    return notes


def sol_section(bd: Breakdown, model: SolModel, ceiling: Ceiling | None, *, model_source: str = "",
                notes: list[str] | None = None, routing: Routing | None = None) -> SolSection:
    """The ``sol`` section of a breakdown. Pure. ``routing``: the capture's measured MoE routing (its steps'
    floors then read the experts really touched; per-layer imbalance in ``moe_layers``)."""
    notes = list(notes or [])
    if ceiling is None:
        return SolSection(status=f"no ceilings for {bd.trace.gpu_name or bd.trace.platform}", model=model.name,
                          model_source=model_source, notes=notes + ["give --ceilings FILE (phaseprof ceilings)"])
    prec = model.compute
    used = SolCeiling(gpu=ceiling.gpu, kind=ceiling.kind, source=ceiling.source, precision=prec,
                      tflops=ceiling.tflops(prec), hbm_tbps=ceiling.hbm_tbps, ridge_flop_per_byte=ceiling.ridge(prec))
    if prec != "bf16" and ceiling.tflops(prec) == ceiling.bf16_tflops:
        notes.append(f"{ceiling.gpu} has no {prec} peak listed: BF16 peak used")
    measured = _measured_routing(routing, model, notes)
    tokens, tok_notes = step_tokens(bd.steps, bd.capture, measured)
    notes += tok_notes
    world = bd.trace.distributed.get("world_size") if isinstance(bd.trace.distributed, dict) else None
    share = 1.0 / world if isinstance(world, int) and world > 1 else 1.0
    if share < 1.0:
        notes.append(f"work divided by the world size {world} (tensor parallelism assumed: each GPU does 1/{world})")
    sums: dict[str, dict[str, _BucketSum]] = {}  # phase -> bucket -> sums over the phase's steps
    steps: list[SolStep] = []
    for row, tok in zip(sorted(bd.steps, key=lambda r: r.index), tokens):
        if tok is None:
            continue
        total, floor = Work(), 0.0
        for comp, w in step_work(model, tok).items():
            w = w.scaled(share)
            f, compute = floor_us(w, ceiling, precision(model, comp))
            sums.setdefault(row.phase, {}).setdefault(str(COMPONENT_BUCKET[comp]), _BucketSum()).add(
                str(comp), w, f, compute)
            total += w
            floor += f
        touched = tok.experts_touched
        steps.append(SolStep(index=row.index, phase=row.phase, tokens=tok.tokens, flops=total.flops,
                             bytes=total.bytes, floor_us=floor, gpu_busy_us=row.gpu_busy_us, wall_us=row.wall_us,
                             pct_of_light_wall=_pct(floor, row.wall_us),
                             routing=None if not model.moe_layers else
                             "measured" if touched is not None else "uniform (assumed)",
                             moe_experts=list(touched) if touched is not None else None))
    skipped = sum(t is None for t in tokens)
    if skipped:
        notes.append(f"{skipped} step(s) without token counts in their marker have no SOL numbers")
    phases = []
    for ph in bd.phases:
        if ph.phase not in sums:
            continue
        times = {b.bucket: b.time_us for b in ph.kernel_view}
        sel = [s for s in steps if s.phase == ph.phase]
        uniform = model.moe_layers and any(s.moe_experts is None for s in sel)
        assumed = {"moe": [ROUTING_ASSUMED]} if uniform else {}
        buckets = sorted((_judged(acc.result(name, times.get(name, 0.0)), assumed.get(name, []),
                                  measured_ceiling=ceiling.kind == "measured")
                          for name, acc in sums[ph.phase].items()), key=lambda b: -b.floor_us)
        notes += _phase_notes(ph.phase, buckets)
        floor = sum(s.floor_us for s in sel)
        busy, wall = sum(s.gpu_busy_us for s in sel), sum(s.wall_us for s in sel)
        phases.append(SolPhase(phase=ph.phase, steps=len(sel), floor_us=floor, gpu_busy_us=busy, wall_us=wall,
                               pct_of_light_busy=_pct(floor, busy), pct_of_light_wall=_pct(floor, wall),
                               buckets=buckets))
    all_measured = bool(steps) and all(s.moe_experts is not None for s in steps)
    assumptions = list(ASSUMPTIONS)
    if model.moe_layers and all_measured:
        assumptions[0] = ROUTING_MEASURED
    if not model.moe_layers:
        assumptions = assumptions[1:]
    if model.quant:
        assumptions.append(f"{model.quant} quantization: quantized GEMMs and experts at the {prec} peak with "
                           f"{model.weight_bytes:g}-byte weights; router, shared-expert gate and lm_head in BF16")
    layers = moe_layers(bd, model, ceiling, tokens, share, routing) if routing is not None else []
    return SolSection(status="ok", model=model.name, model_source=model_source, ceiling=used, phases=phases,
                      steps=steps, assumptions=assumptions, notes=notes,
                      routing=None if not model.moe_layers else
                      ("measured (routing.npz)" if all_measured else "uniform (assumed)"), moe_layers=layers)


def _measured_routing(routing: Routing | None, model: SolModel,
                      notes: list[str]) -> dict[int, tuple[int, tuple[int, ...]]]:
    """Marker step index -> (tokens, distinct experts per MoE layer) from ``routing``, when it fits the model."""
    if routing is None or not model.moe_layers:
        return {}
    shape = routing.counts.shape
    if shape[1:] != (model.moe_layers, model.num_experts):
        notes.append(f"routing.npz has {shape[1]} layers x {shape[2]} experts, the model {model.moe_layers} x "
                     f"{model.num_experts}: not used, uniform routing assumed")
        return {}
    touched = routing.distinct()
    return {int(s): (int(n), touched[int(s)]) for s, n in zip(routing.steps, routing.tokens)}


def with_sol(bd: Breakdown, section: SolSection) -> Breakdown:
    """The breakdown with its ``sol`` section set."""
    return replace(bd, sol=section)


__all__ = ["ASSUMPTIONS", "MEASURED_MARGIN", "MODEL_BUG", "NEEDS_CONFIG", "ROUTING_ASSUMED", "ROUTING_MEASURED", "sol_section",
           "step_tokens", "with_sol"]
