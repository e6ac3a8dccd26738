"""Cross-GPU explanations from the sol sections: how much of a bucket's A → B change is the GPU's ceiling and
how much is efficiency, and a projection of one capture onto another GPU at equal efficiency.

Per bucket and step: ``time = floor / efficiency`` (efficiency = % of light / 100), so the speedup A → B splits
exactly into ``floor_A / floor_B`` ("ceilings": what speed of light predicts; equal to the ratio of the binding
ceilings when the work is the same) times ``efficiency_B / efficiency_A``.
"""

from __future__ import annotations

from dataclasses import dataclass

from phaseprof.analysis.results import Breakdown
from phaseprof.errors import PhaseprofError
from phaseprof.routing import Routing
from phaseprof.sol.analyze import sol_section
from phaseprof.sol.ceilings import Ceiling
from phaseprof.sol.model import SolModel
from phaseprof.analysis.sol_results import SolCeiling, SolSection


@dataclass(frozen=True)
class BucketChange:
    """One bucket of one phase on both sides, per step. ``speedup = a_ms / b_ms = ceilings × efficiency``."""

    phase: str
    bucket: str
    a_ms: float
    b_ms: float
    speedup: float
    ceilings: float
    efficiency: float
    a_pct_of_light: float
    b_pct_of_light: float


def explain(a: SolSection, b: SolSection) -> list[BucketChange]:
    """Buckets present with measured time on both sides, biggest A time first. Both sections must be ok."""
    out = []
    for pa in a.phases:
        pb = b.phase(pa.phase)
        if pb is None:
            continue
        byb = {x.bucket: x for x in pb.buckets}
        for x in pa.buckets:
            y = byb.get(x.bucket)
            if y is None or not (x.time_us and y.time_us and x.floor_us and y.floor_us):
                continue
            na, nb = max(pa.steps, 1), max(pb.steps, 1)
            ta, tb, fa, fb = x.time_us / na, y.time_us / nb, x.floor_us / na, y.floor_us / nb
            out.append(BucketChange(pa.phase, x.bucket, ta / 1e3, tb / 1e3, ta / tb, fa / fb,
                                    (fb / tb) / (fa / ta), 100 * fa / ta, 100 * fb / tb))
    return sorted(out, key=lambda c: (c.phase, -c.a_ms))


def sentence(c: BucketChange) -> str:
    """'moe 2.2x faster: ceilings 2.27x, efficiency 0.97x'."""
    how = f"{c.speedup:.2f}x faster" if c.speedup >= 1 else f"{1 / c.speedup:.2f}x slower"
    return f"{c.phase} {c.bucket} {how}: ceilings {c.ceilings:.2f}x, efficiency {c.efficiency:.2f}x"


@dataclass(frozen=True)
class BucketProjection:
    phase: str
    bucket: str
    measured_ms: float  # per step, on the capture's GPU
    pct_of_light: float
    floor_ms: float  # on the capture's GPU
    target_floor_ms: float
    projected_ms: float  # estimate: measured × target floor / floor (equal efficiency)


@dataclass(frozen=True)
class Projection:
    """An estimate, never a measurement: the capture's buckets at their measured efficiency on ``target``.
    Time outside the modelled buckets (memory copies, sampling, idle) is carried over unchanged."""

    source_gpu: str
    source_ceiling: SolCeiling
    target: Ceiling
    buckets: list[BucketProjection]
    busy_ms: dict[str, float]  # phase -> measured GPU busy per step
    projected_busy_ms: dict[str, float]  # phase -> estimate per step


def project(bd: Breakdown, model: SolModel, target: Ceiling, routing: Routing | None = None) -> Projection:
    """Project a breakdown (with an ok sol section, computed for ``model`` and ``routing``) onto ``target`` at
    equal efficiency (the same measured routing on both sides)."""
    src = bd.sol
    if src is None or not src.ok:
        raise PhaseprofError(f"cannot project: speed of light {src.status if src else 'not computed'}")
    there = sol_section(bd, model, target, routing=routing)
    buckets = []
    busy, proj = {}, {}
    for ph in src.phases:
        tp = there.phase(ph.phase)
        if tp is None:
            continue
        n = max(ph.steps, 1)
        tb = {x.bucket: x for x in tp.buckets}
        saved = 0.0
        for b in ph.buckets:
            t = tb.get(b.bucket)
            if t is None or not (b.time_us and b.floor_us):
                continue
            projected = b.time_us * t.floor_us / b.floor_us
            saved += b.time_us - projected
            buckets.append(BucketProjection(ph.phase, b.bucket, b.time_us / n / 1e3, b.pct_of_light or 0.0,
                                            b.floor_us / n / 1e3, t.floor_us / n / 1e3, projected / n / 1e3))
        busy[ph.phase] = ph.gpu_busy_us / n / 1e3
        proj[ph.phase] = (ph.gpu_busy_us - saved) / n / 1e3
    return Projection(bd.trace.gpu_name or "?", src.ceiling, target, buckets, busy, proj)  # type: ignore[arg-type]
