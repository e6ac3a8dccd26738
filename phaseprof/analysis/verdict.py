"""One line per phase that says what bounds it, read off the breakdown's numbers (and its speed of light when
there is one), plus the warnings a reader needs before trusting the timings.

- verdict: host-bound (GPU busy under ``BOUND_BUSY_PCT`` of the step and the host — its own work or launch
  calls — behind most of the idle time; in a trace recorded with Python stacks the line names the stack
  recorder's estimated share, and calls the phase profiler-bound where the GPU would be busy at least
  ``BOUND_BUSY_PCT`` of the step without it: ``analysis.profiler_cost``), wait-bound (idle mostly with work
  already launched: dependencies, syncs, the step's tail) or GPU-bound (then the largest kernel bucket, at its % of speed of light).
- views: where the kernel view (what ran) and the module view (what it ran for) disagree by
  ``VIEWS_DIFFER_PP`` points or more, and which module-view rows are module class names no rule covers.
- noise: the capture's clean (profiler-off) timings spread more than ``NOISE_SPREAD_PCT`` of their median, or
  the profiled run was faster than the clean one: the machine was busy while it was measured.

Analysis only: the CLI and the dashboard print these lines; they compute none of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from phaseprof.analysis.profiler_types import PhaseProfilerCost
from phaseprof.analysis.results import Breakdown, PhaseSummary
from phaseprof.analysis.verdict_types import PhaseVerdict, Verdicts
from phaseprof.classify.buckets import Bucket
from phaseprof.analysis.sol_results import SolSection
from phaseprof.records import RunRecord

#: Below this GPU-busy share of the step wall, the phase is bound by whatever keeps the GPU idle.
BOUND_BUSY_PCT = 50.0
#: A bucket whose share differs by this many percentage points between the two views gets a note.
VIEWS_DIFFER_PP = 10.0
#: Clean timings whose p10-p90 range exceeds this % of their median were taken on a busy machine.
NOISE_SPREAD_PCT = 10.0


class Bound(StrEnum):
    """What limits a phase's steps."""

    HOST = "host-bound"  # the GPU waits for the host to launch work
    WAIT = "wait-bound"  # launched work waits: dependencies, syncs, the step's tail
    GPU = "GPU-bound"  # the GPU is busy most of the step
    PROFILER = "profiler-bound"  # host-bound only through the profiler's own Python-stack recording
    CPU = "CPU ops"  # CPU-only trace: no GPU to be bound by


def _pct(part: float, whole: float) -> float:
    return 100.0 * part / whole if whole else 0.0


def _light(sol: SolSection | None, phase: str, bucket: str) -> float | None:
    if sol is None or not sol.ok:
        return None
    p = next((p for p in sol.phases if p.phase == phase), None)
    b = next((b for b in p.buckets if b.bucket == bucket), None) if p else None
    return b.pct_of_light if b else None


def view_notes(ph: PhaseSummary) -> list[str]:
    """Where the kernel and module views disagree, and which module-view rows are module class names."""
    kv = {b.bucket: b.share_pct for b in ph.kernel_view}
    mv = {b.bucket: b.share_pct for b in ph.module_view}
    out = []
    names = set(kv) | set(mv)
    if names:
        more_k = max(names, key=lambda b: (kv.get(b, 0.0) - mv.get(b, 0.0), b))
        more_m = max(names, key=lambda b: (mv.get(b, 0.0) - kv.get(b, 0.0), b))
        if kv.get(more_k, 0.0) - mv.get(more_k, 0.0) >= VIEWS_DIFFER_PP:
            out.append(f"views differ: {more_k} is {kv.get(more_k, 0.0):.0f}% of kernels but "
                       f"{mv.get(more_k, 0.0):.0f}% of modules, {more_m} {mv.get(more_m, 0.0):.0f}% of modules but "
                       f"{kv.get(more_m, 0.0):.0f}% of kernels: kernels say what ran, modules what it ran for")
    known = {b.value for b in Bucket}
    classes = sorted(b for b in mv if b not in known)
    if classes:
        out.append(f"module view: {', '.join(classes)} = module class(es) outside the decoder layers that no rule "
                   "names")
    return out


def _without_profiler(ph: PhaseSummary, cost: PhaseProfilerCost, starved_us: float) -> tuple[float, float]:
    """GPU busy % of the wall once the stack recorder's estimated host time (low, high) is taken out of the time
    the GPU waited for the host (never more than that time: the rest was hidden behind GPU work)."""
    return tuple(_pct(ph.gpu_busy_us, ph.wall_us - min(e, starved_us))  # type: ignore[return-value]
                 for e in (cost.overhead_low_us, cost.overhead_high_us))


def _profiler_said(line: str, ph: PhaseSummary, cost: PhaseProfilerCost, starved_us: float) -> tuple[Bound, str]:
    """A host-bound verdict with the profiler's share named. PROFILER where the GPU would be busy at least
    BOUND_BUSY_PCT of the step without the recorder's estimated time (at its high end; where only the high end
    gets there, the line says at what cost per frame the step would still be host-bound); else host-bound, with the
    estimate said."""
    lo, hi = _without_profiler(ph, cost, starved_us)
    est = (f"the profiler's Python-stack recording ~{cost.overhead_low_us / 1e3:.0f}-"
           f"{cost.overhead_high_us / 1e3:.0f} ms of its {ph.wall_us / 1e3:.0f} ms ({cost.python_frames:,} frames, "
           "estimate)")
    if hi < BOUND_BUSY_PCT:
        return Bound.HOST, f"{line}; even without {est}, GPU busy ≤{hi:.0f}%: host-bound on its own account"
    head = (f"{ph.phase}: {Bound.PROFILER} — GPU busy {_pct(ph.gpu_busy_us, ph.wall_us):.0f}% of the step under the "
            f"profiler: {est}; without it GPU busy ~{lo:.0f}-{hi:.0f}%: ")
    if lo >= BOUND_BUSY_PCT:
        return Bound.PROFILER, head + "not host-bound on the server's account"
    # the recorder's cost per frame at which the step would be just host-bound: wall - c x frames = 2 x busy
    per_frame = (ph.wall_us - 100.0 / BOUND_BUSY_PCT * ph.gpu_busy_us) / cost.python_frames
    return Bound.PROFILER, head + (f"host-bound on the server's account only if the recorder cost under "
                                   f"{per_frame:.2f} us a frame")


def phase_verdict(ph: PhaseSummary, *, device: str, sol: SolSection | None = None,
                  profiler: PhaseProfilerCost | None = None) -> PhaseVerdict:
    """The verdict of one phase (see the module docstring for the rules). ``profiler``: the stack recorder's
    estimated host cost in this phase (``analysis.profiler_cost``): a host-bound verdict names it."""
    busy = _pct(ph.gpu_busy_us, ph.wall_us)
    launch, host = _pct(ph.idle.launch_overhead_us, ph.wall_us), _pct(ph.idle.host_work_us, ph.wall_us)
    other = _pct(ph.idle.other_us, ph.wall_us)
    top = max(ph.kernel_view, key=lambda b: b.time_us, default=None)
    light = _light(sol, ph.phase, top.bucket) if top else None
    top_text = "" if top is None else f"{top.bucket} {top.share_pct:.0f}% of " + \
        ("op time" if device == "cpu" else "GPU time") + \
        (f" at {light:.0f}% of its speed of light" if light is not None else "")
    if device == "cpu":
        bound = Bound.CPU
        line = f"{ph.phase}: CPU ops {busy:.0f}% of the step" + (f"; {top_text}" if top_text else "")
    elif busy < BOUND_BUSY_PCT:
        bound = Bound.HOST if launch + host >= other else Bound.WAIT
        causes = sorted([("host work", host), ("launch", launch), ("queued/tail", other)], key=lambda c: -c[1])
        line = (f"{ph.phase}: {bound} — GPU busy {busy:.0f}% of the step; idle: "
                + ", ".join(f"{n} {v:.0f}%" for n, v in causes[:2]))
        if bound == Bound.HOST and profiler is not None and profiler.python_frames:
            starved = ph.idle.launch_overhead_us + ph.idle.host_work_us
            bound, line = _profiler_said(line, ph, profiler, starved)
    else:
        bound = Bound.GPU
        line = f"{ph.phase}: {bound}, busy {busy:.0f}%" + (f" — {top_text}" if top_text else "")
    return PhaseVerdict(phase=ph.phase, bound=str(bound), line=line, busy_pct=busy, launch_pct=launch,
                        host_work_pct=host, other_idle_pct=other, top_bucket=top.bucket if top else None,
                        top_bucket_pct=top.share_pct if top else 0.0, top_bucket_pct_of_light=light,
                        views=view_notes(ph))


def noise_warnings(run: Mapping[str, Any]) -> list[str]:
    """Warnings from a capture's run record (run.json content, or the flat record a trace embeds): the clean
    timings' spread and the profiler overhead ratio."""
    out = []
    timing = run.get("timing") if isinstance(run.get("timing"), Mapping) else {}
    metric = timing.get("headline_metric")
    stats = timing.get(metric) if isinstance(metric, str) else None
    if isinstance(stats, Mapping):
        try:
            p10, p90, med, n = (float(stats["p10_ms"]), float(stats["p90_ms"]), float(stats["median_ms"]),
                                int(stats.get("n") or 0))
        except (KeyError, TypeError, ValueError):
            p10 = p90 = med = n = 0
        spread = _pct(p90 - p10, med)
        if med > 0 and spread > NOISE_SPREAD_PCT:
            out.append(f"noisy timings: clean {metric.upper()} p10-p90 spans {spread:.0f}% of its median "
                       f"({p10:.2f}-{p90:.2f} ms over {n} runs): the machine was likely busy")
    profile = run.get("profile") if isinstance(run.get("profile"), Mapping) else {}
    ratio = profile.get("overhead_ratio", run.get("profiler_overhead_ratio"))
    if isinstance(ratio, (int, float)) and 0 < ratio < 1:
        out.append(f"profiled run faster than the clean one (overhead x{ratio:.2f}): the clean timing was "
                   "disturbed")
    return out


def verdicts_of(bd: Breakdown, *, run: RunRecord | None = None) -> Verdicts:
    """The verdicts of every phase of ``bd`` (with its ``sol`` section, when attached) and the noise
    warnings of its capture (``run``: the run directory's run.json; the breakdown's embedded capture record
    otherwise)."""
    device = bd.trace.device
    record = {**(bd.capture.to_dict() if bd.capture is not None else {}), **(run.to_dict() if run else {})}
    cost = bd.profiler
    return Verdicts(phases=[phase_verdict(ph, device=device, sol=bd.sol,
                                          profiler=cost.phase(ph.phase) if cost is not None else None)
                            for ph in bd.phases],
                    noise=noise_warnings(record))
