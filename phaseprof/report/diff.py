"""Compare two breakdowns (A = baseline, B = candidate): what moved, per phase, in both views.

Conventions used by every number here:
- Changes are ``B − A``; ``rel_pct`` is ``100 · (B − A) / |A|`` (None when A is 0 or a side is missing).
- Times and counts are **per step**: the mean over the phase's steps, so runs with different step counts
  compare. Times are milliseconds.
- Shares are percent of the phase's GPU busy time (busy = union of kernel, memcpy and memset intervals);
  their changes are percentage points (pp).
- Kernels are matched inside the same phase, kernel-view bucket and module-view bucket only, never by name
  alone: equal names first, then a minimum-cost pairing on calls per step, time per step and position in
  the step (or time rank when only breakdown JSON is at hand). Only each bucket's top kernels (as kept in
  the breakdown) take part.

``diff_breakdowns`` is pure; ``load_side`` read breakdown JSON, run directories or
raw traces (analysed on the fly).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from phaseprof.analysis.results import Breakdown, KernelStat, PhaseSummary
from phaseprof.errors import PhaseprofError
from phaseprof.inputs import InputKind, resolve
from phaseprof.records import RunRecord
from phaseprof.report.json_io import load_breakdown

if TYPE_CHECKING:  # the analysis (pandas) is imported only when a raw trace is diffed: `phaseprof --help` stays fast
    from phaseprof.analysis.order import KernelOrder

#: Per-step phase metrics: diff name -> (key in ``PhaseSummary.per_step``, unit, scale from the stored unit).
PHASE_METRICS: dict[str, tuple[str, str, float]] = {
    "wall_ms": ("wall_us", "ms", 1e-3),
    "gpu_busy_ms": ("gpu_busy_us", "ms", 1e-3),
    "gpu_idle_ms": ("gpu_idle_us", "ms", 1e-3),
    "busy_pct": ("busy_pct", "%", 1.0),
    "launch_overhead_ms": ("launch_overhead_us", "ms", 1e-3),
    "host_work_ms": ("host_work_us", "ms", 1e-3),
    "kernels_per_step": ("kernels", "count", 1.0),
    "launches_per_step": ("launch_calls", "count", 1.0),
    "graph_launches_per_step": ("graph_launches", "count", 1.0),
    "allocations_per_step": ("allocations", "count", 1.0),
    "gpu_allocations_per_step": ("gpu_allocations", "count", 1.0),
    "device_mallocs_per_step": ("device_mallocs", "count", 1.0),
    "memcpy_per_step": ("memcpy_count", "count", 1.0),
}
#: Run-level clean timings (measured with the profiler off by ``phaseprof capture``), in ms.
TIMING_METRICS: tuple[str, ...] = ("ttft_ms", "tpot_ms")
_MATCH_GAP_COST = 1.0  # leaving a kernel unmatched; a pair costing more than two of these is never made
_PAIR_MAX = 12  # per group and side, the kernels with most time that take part in pairing (breakdowns keep 10)


@dataclass(frozen=True)
class Delta:
    """One number on both sides: ``change = b − a``; ``rel_pct = 100·change/|a|`` (None if a is 0/missing)."""

    metric: str
    unit: str  # "ms" | "%" (share or busy percent; change in pp) | "count"
    a: float | None
    b: float | None
    change: float | None
    rel_pct: float | None


def make_delta(metric: str, unit: str, a: float | None, b: float | None) -> Delta:
    change = None if a is None or b is None else b - a
    rel = None if change is None or not a else 100.0 * change / abs(a)
    return Delta(metric, unit, a, b, change, rel)


@dataclass(frozen=True)
class BucketDelta:
    """One bucket of one view: ``time_ms`` and ``count`` per step, ``share`` in % of GPU busy (change in pp).
    A bucket absent on one side counts as 0 there."""

    bucket: str
    time_ms: Delta
    share: Delta
    count: Delta


@dataclass(frozen=True)
class KernelSide:
    """One kernel name on one side. ``position``: median position of its first launch in the step, 0 = first
    GPU item of the step, 1 = last (None when only breakdown JSON was given); ``rank``: 1 = most time in its
    bucket and module."""

    name: str
    ms_per_step: float
    calls_per_step: float
    position: float | None
    rank: int


@dataclass(frozen=True)
class KernelMatch:
    """A pair of kernels doing the same job, or one side left unmatched. ``how``: "name" (the same kernel name
    on both sides, matched first, whatever bucket or module each side gave it), "order" (aligned by order in
    the step) or "rank" (aligned by time rank), both only within one (bucket, module) group, "unmatched".
    ``bucket`` / ``module``: A's group (B's for a kernel only B ran); ``b_bucket`` / ``b_module``: B's group
    when a same-name pair sits in another one (None when both sides agree)."""

    bucket: str
    module: str
    a: KernelSide | None
    b: KernelSide | None
    how: str
    b_bucket: str | None = None
    b_module: str | None = None

    @property
    def group(self) -> str:
        """``bucket`` or ``bucket/module``, with B's after an arrow where B's group differs."""
        def one(bucket: str, module: str) -> str:
            return bucket if bucket == module else f"{bucket}/{module}"

        a = one(self.bucket, self.module)
        if self.b_bucket is None and self.b_module is None:
            return a
        return f"{a} → {one(self.b_bucket or self.bucket, self.b_module or self.module)}"


@dataclass(frozen=True)
class PhaseDiff:
    """One phase present on both sides. ``metrics``: per-step means (see PHASE_METRICS) plus
    ``other_idle_ms``; ``launches_by_api``: host launch calls per step, by API."""

    phase: str
    a_steps: int
    b_steps: int
    metrics: tuple[Delta, ...]
    launches_by_api: tuple[Delta, ...]
    kernel_view: tuple[BucketDelta, ...]
    module_view: tuple[BucketDelta, ...]
    kernels: tuple[KernelMatch, ...]  # matched pairs first, then unmatched, by bucket
    coverage: tuple[Delta, ...] = ()  # % of GPU busy whose module view each attribution method gave
    layers: tuple[Delta, ...] = ()  # ms per step of each decoder layer ("layer 17 gdn+moe"), both sides with layers

    def metric(self, name: str) -> Delta | None:
        return next((m for m in self.metrics if m.metric == name), None)


@dataclass(frozen=True)
class Comparability:
    """One aspect checked before comparing: ``status`` is "same", "differs" or "unknown" (not recorded)."""

    aspect: str
    a: str
    b: str
    status: str


@dataclass(frozen=True)
class Side:
    """What one input is: where it came from and what it ran on."""

    label: str
    path: str
    gpu: str
    platform: str
    device: str
    model: str | None
    mode: str | None  # "eager" / "graph" from capture info, else inferred from graph launches
    phases: dict[str, int]  # phase -> steps


@dataclass(frozen=True)
class BreakdownDiff:
    a: Side
    b: Side
    comparability: tuple[Comparability, ...]
    timings: tuple[Delta, ...]  # clean TTFT / TPOT (ms), when at least one side carries them
    phases: tuple[PhaseDiff, ...]  # phases present on both sides, in pipeline order
    only_in_a: tuple[str, ...]  # phases A has and B lacks
    only_in_b: tuple[str, ...]
    notes: tuple[str, ...] = ()  # how the comparison was made where it is not obvious

    @property
    def warnings(self) -> list[str]:
        """One sentence per aspect where A and B differ (they are not strictly comparable)."""
        return [f"{c.aspect} differs: {c.a} (A) vs {c.b} (B)" for c in self.comparability if c.status == "differs"]

    def phase(self, name: str) -> PhaseDiff | None:
        return next((p for p in self.phases if p.phase == name), None)


# ---------------------------------------------------------------------------------------------- loading


@dataclass(frozen=True)
class Loaded:
    """A breakdown plus, when a raw trace was analysed, each kernel's order in the step."""

    breakdown: Breakdown
    order: KernelOrder | None
    source: str  # "breakdown" | "trace" | "run-dir"


def load_side(path: str | Path, *, rules: list[Path] | None = None, model_config: str | None = None) -> Loaded:
    """Read one diff input (``inputs.resolve``): a breakdown JSON, a run directory (``breakdown.json`` / trace /
    ``run.json``; a rank directory counts as its first rank) or a raw trace. A run directory's
    ``breakdown.json`` is used as is unless ``rules`` are given and the trace is there (then the trace is
    re-analysed); its ``run.json`` is the breakdown's ``capture``. ``model_config``: for a trace analysed here,
    the config whose layer plan places graph-replayed kernels (``analysis.structural``; default: what run.json
    records)."""
    got = resolve(path)
    if got.kind == InputKind.BREAKDOWN:
        return Loaded(load_breakdown(got.path), None, "breakdown")
    if got.kind == InputKind.TRACE:
        return _analyze(got.path, rules, model_config)
    if got.kind == InputKind.SWEEP:
        raise PhaseprofError("a sweep, not a run: diff compares run directories, traces or breakdowns",
                             path=got.path)
    if got.breakdown is not None and not (rules and got.trace):
        loaded = Loaded(load_breakdown(got.breakdown), None, "run-dir")
    elif got.trace is not None:
        loaded = replace(_analyze(got.trace, rules, model_config), source="run-dir")
    else:
        raise PhaseprofError("not a run directory (no breakdown.json and no trace)", path=got.path)
    if got.run_json is not None:
        loaded = replace(loaded, breakdown=replace(loaded.breakdown, capture=RunRecord.read(got.run_json)))
    return loaded


def _analyze(trace: Path, rules: list[Path] | None, model_config: str | None = None) -> Loaded:
    from phaseprof.analysis.pipeline import AnalysisConfig, analyze

    at = analyze(trace, config=AnalysisConfig.with_rules(rules, model_config=model_config))
    return Loaded(at.breakdown, at.kernel_order, "trace")


# ------------------------------------------------------------------------------------------- comparing
def clean_timings(capture: RunRecord | None) -> dict[str, float]:
    """Clean (profiler-off) TTFT / TPOT medians in ms the capture recorded (``RunRecord.clean_ms``)."""
    return {} if capture is None else {k: v for k, v in capture.clean_ms.items() if math.isfinite(v)}


def _mode(bd: Breakdown) -> str | None:
    m = bd.capture.execution_mode if bd.capture else None
    if m or not bd.steps or bd.trace.device != "gpu":
        return m
    return "graph (inferred)" if any(s.launches.graph_launches for s in bd.steps) else "eager (inferred)"


def attribution_basis(bd: Breakdown) -> str | None:
    """The richest evidence the module view rests on: "module tree", "graph alignment", "structural" or "op stack" when that
    method gave at least a tenth of the GPU time, else "kernel names"; None for breakdowns without the section."""
    a = bd.attribution
    if a is None or not a.phases:
        return None
    total: dict[str, float] = {}
    for pa in a.phases:
        for m, us in pa.coverage_us.items():
            total[m] = total.get(m, 0.0) + us
    busy = sum(total.values())
    for m in ("module_tree", "graph_alignment", "structural", "op_stack"):
        if busy and total.get(m, 0.0) >= 0.1 * busy:
            return m.replace("_", " ")
    return "kernel names"


def _side(bd: Breakdown, label: str | None) -> Side:
    tr = bd.trace
    return Side(label=label or Path(tr.path).name, path=tr.path, gpu=tr.gpu_name or tr.platform,
                platform=tr.platform, device=tr.device,
                model=bd.capture.model.name if bd.capture else None, mode=_mode(bd),
                phases={p.phase: p.steps for p in bd.phases})


def _tokens(bd: Breakdown) -> str | None:
    per_phase = {}
    for ph in bd.phases:
        rows = [s for s in bd.steps if s.phase == ph.phase and s.context_tokens is not None]
        if rows:
            ctx = sum(s.context_tokens or 0 for s in rows) / len(rows)
            gen = sum(s.generation_tokens or 0 for s in rows) / len(rows)
            per_phase[ph.phase] = f"{ph.phase} {ctx:g}+{gen:g}"
    if per_phase:
        return ", ".join(per_phase.values()) + " tokens/step (context+generation)"
    t = bd.capture.request.prompt_tokens if bd.capture else None
    return f"{t} tokens" if t else None


def _compare(aspect: str, a: object, b: object) -> Comparability:
    sa, sb = ("not recorded" if v is None else str(v) for v in (a, b))
    # "eager (inferred)" (from launch patterns) agrees with a recorded "eager": compare the values, keep the labels.
    same = sa.removesuffix(" (inferred)") == sb.removesuffix(" (inferred)")
    status = "unknown" if a is None or b is None else ("same" if same else "differs")
    return Comparability(aspect, sa, sb, status)


def comparability(a: Breakdown, b: Breakdown) -> tuple[Comparability, ...]:
    """Model, token counts, phases, mode, GPU, platform, world size and step detection of A against B."""
    def world(bd: Breakdown) -> object:
        return bd.trace.distributed.get("world_size")

    sa, sb = _side(a, None), _side(b, None)
    return (
        _compare("model", sa.model, sb.model),
        _compare("tokens", _tokens(a), _tokens(b)),
        # step counts may differ freely: every number is per step
        _compare("phases", ", ".join(sa.phases) or "none", ", ".join(sb.phases) or "none"),
        _compare("mode", sa.mode, sb.mode),
        _compare("GPU", a.trace.gpu_name, b.trace.gpu_name),
        _compare("platform", f"{a.trace.platform}/{a.trace.device}", f"{b.trace.platform}/{b.trace.device}"),
        _compare("world size", world(a), world(b)),
        _compare("step detection", a.step_detection.get("method"), b.step_detection.get("method")),
        # module views built on different evidence (module tree vs kernel names) are not like for like
        _compare("module view basis", attribution_basis(a), attribution_basis(b)),
    )


def _per_step(ph: PhaseSummary, key: str) -> float | None:
    s = ph.per_step.get(key)
    return None if s is None else float(s.mean)


def _bucket_deltas(a: PhaseSummary, b: PhaseSummary, view: str) -> tuple[BucketDelta, ...]:
    ra = {x.bucket: x for x in getattr(a, view)}
    rb = {x.bucket: x for x in getattr(b, view)}
    na, nb = max(a.steps, 1), max(b.steps, 1)
    out = []
    for name in list(ra) + [k for k in rb if k not in ra]:
        xa, xb = ra.get(name), rb.get(name)
        out.append(BucketDelta(
            name,
            make_delta("time_ms", "ms", xa.time_us / 1e3 / na if xa else 0.0, xb.time_us / 1e3 / nb if xb else 0.0),
            make_delta("share", "%", xa.share_pct if xa else 0.0, xb.share_pct if xb else 0.0),
            make_delta("count", "count", xa.count / na if xa else 0.0, xb.count / nb if xb else 0.0)))
    return tuple(sorted(out, key=lambda d: -max(d.time_ms.a or 0.0, d.time_ms.b or 0.0)))


def _launches_by_api(bd: Breakdown, phase: str) -> dict[str, float]:
    rows = [s for s in bd.steps if s.phase == phase]
    tot: dict[str, float] = {}
    for s in rows:
        for api, n in s.launches.by_api.items():
            tot[api] = tot.get(api, 0.0) + n
    return {k: v / max(len(rows), 1) for k, v in tot.items()}


# ------------------------------------------------------------------------------------- kernel matching
def _sides(ph: PhaseSummary, order: Mapping[str, float] | None) -> dict[tuple[str, str], list[KernelSide]]:
    groups: dict[tuple[str, str], list[KernelStat]] = {}
    for ks in ph.top_kernels.values():
        for k in ks:
            groups.setdefault((k.bucket, k.module), []).append(k)
    n = max(ph.steps, 1)
    out = {}
    for key, ks in groups.items():
        ks = sorted(ks, key=lambda k: -k.time_us)
        out[key] = [KernelSide(k.name, k.time_us / 1e3 / n, k.count / n,
                               None if order is None else order.get(k.name), i + 1) for i, k in enumerate(ks)]
    return out


def _pair_cost(x: KernelSide, y: KernelSide, rank_x: float, rank_y: float) -> float:
    """How unlike two kernels of one group are: half the |log2| of their calls-per-step ratio, a quarter of
    the |log2| of their time ratio (vendors differ in speed far less than unrelated kernels do), plus the gap
    between their positions in the step (start vs end of step costs as much as leaving one out) or, without
    positions, the gap between their time ranks (``rank_*``: 0 = most time of the candidates, 1 = least)."""
    def ratio(u: float, v: float) -> float:
        return abs(math.log2(max(u, 1e-9) / max(v, 1e-9)))

    if x.position is not None and y.position is not None:
        where = abs(x.position - y.position)
    else:
        where = abs(rank_x - rank_y)
    return 0.5 * ratio(x.calls_per_step, y.calls_per_step) + 0.25 * ratio(x.ms_per_step, y.ms_per_step) + where


def _assign(xs: list[KernelSide], ys: list[KernelSide]) -> list[tuple[int, int]]:
    """Minimum-cost pairing of two time-sorted lists, exact (dynamic programming over subsets of ``ys``):
    each kernel pairs at most once, leaving one out costs ``_MATCH_GAP_COST``. Callers keep both lists to
    ``_PAIR_MAX`` kernels."""
    nx, ny = max(len(xs) - 1, 1), max(len(ys) - 1, 1)
    c = [[_pair_cost(x, y, i / nx, j / ny) for j, y in enumerate(ys)] for i, x in enumerate(xs)]
    best: dict[int, tuple[float, tuple[tuple[int, int], ...]]] = {0: (0.0, ())}
    for i in range(len(xs)):
        nxt: dict[int, tuple[float, tuple[tuple[int, int], ...]]] = {}
        for mask, (cost, pr) in best.items():
            options = [(mask, cost + _MATCH_GAP_COST, pr)]
            options += [(mask | 1 << j, cost + c[i][j], pr + ((i, j),)) for j in range(len(ys)) if not mask >> j & 1]
            for m, v, p in options:
                if m not in nxt or v < nxt[m][0] - 1e-12:
                    nxt[m] = (v, p)
        best = nxt
    total = {m: v + _MATCH_GAP_COST * (len(ys) - bin(m).count("1")) for m, (v, _) in best.items()}
    return list(best[min(total, key=lambda m: (total[m], m))][1])


def match_kernels(a: PhaseSummary, b: PhaseSummary, *, order_a: Mapping[str, float] | None = None,
                  order_b: Mapping[str, float] | None = None) -> tuple[KernelMatch, ...]:
    """Pair the top kernels of A and B: identical names first, across the whole phase (a kernel both sides ran
    is the same kernel whatever bucket or module each side gave it; several of one name pair in time order),
    then what is left by order in the step or time rank within each (kernel bucket, module) group."""
    ga, gb = _sides(a, order_a), _sides(b, order_b)
    ax = [(key, x) for key, xs in ga.items() for x in xs]
    by = [(key, y) for key, ys in gb.items() for y in ys]
    taken_a: set[int] = set()
    taken_b: set[int] = set()
    out: list[KernelMatch] = []
    # a same-group pair first, so that a name found in two groups on both sides keeps each pair in its group
    for same_group in (True, False):
        for i, (ka, x) in enumerate(ax):
            if i in taken_a:
                continue
            j = next((j for j, (kb, y) in enumerate(by) if j not in taken_b and y.name == x.name
                      and (kb == ka or not same_group)), None)
            if j is None:
                continue
            taken_a.add(i)
            taken_b.add(j)
            kb = by[j][0]
            out.append(KernelMatch(ka[0], ka[1], x, by[j][1], "name",
                                   b_bucket=None if kb == ka else kb[0], b_module=None if kb == ka else kb[1]))
    rest_a = {key: [x for i, (k, x) in enumerate(ax) if k == key and i not in taken_a] for key in ga}
    rest_b = {key: [y for j, (k, y) in enumerate(by) if k == key and j not in taken_b] for key in gb}
    for key in list(ga) + [k for k in gb if k not in ga]:
        rx, ry = rest_a.get(key, []), rest_b.get(key, [])
        by_order = all(k.position is not None for k in rx + ry)
        ij = _assign(rx[:_PAIR_MAX], ry[:_PAIR_MAX])
        used_x, used_y = {i for i, _ in ij}, {j for _, j in ij}
        out += [KernelMatch(key[0], key[1], rx[i], ry[j], "order" if by_order else "rank") for i, j in ij]
        out += [KernelMatch(key[0], key[1], x, None, "unmatched") for i, x in enumerate(rx) if i not in used_x]
        out += [KernelMatch(key[0], key[1], None, y, "unmatched") for j, y in enumerate(ry) if j not in used_y]

    def weight(m: KernelMatch) -> float:
        return max(m.a.ms_per_step if m.a else 0.0, m.b.ms_per_step if m.b else 0.0)

    return tuple(sorted(out, key=lambda m: (m.how == "unmatched", -weight(m))))


def diff_phase(a: PhaseSummary, b: PhaseSummary, *, a_bd: Breakdown, b_bd: Breakdown,
               order_a: Mapping[str, float] | None = None,
               order_b: Mapping[str, float] | None = None) -> PhaseDiff:
    metrics = [make_delta(name, unit, None if (va := _per_step(a, key)) is None else va * scale,
                          None if (vb := _per_step(b, key)) is None else vb * scale)
               for name, (key, unit, scale) in PHASE_METRICS.items()]
    metrics.append(make_delta("other_idle_ms", "ms", a.idle.other_us / 1e3 / max(a.steps, 1),
                              b.idle.other_us / 1e3 / max(b.steps, 1)))
    la, lb = _launches_by_api(a_bd, a.phase), _launches_by_api(b_bd, b.phase)
    apis = sorted(set(la) | set(lb), key=lambda k: -max(la.get(k, 0.0), lb.get(k, 0.0)))
    return PhaseDiff(
        phase=a.phase if a.phase != "unknown" else b.phase, a_steps=a.steps, b_steps=b.steps, metrics=tuple(metrics),
        launches_by_api=tuple(make_delta(k, "count", la.get(k, 0.0), lb.get(k, 0.0)) for k in apis),
        kernel_view=_bucket_deltas(a, b, "kernel_view"), module_view=_bucket_deltas(a, b, "module_view"),
        kernels=match_kernels(a, b, order_a=order_a, order_b=order_b),
        coverage=_coverage_deltas(a_bd, a.phase, b_bd, b.phase), layers=_layer_deltas(a_bd, a, b_bd, b))


def _phase_attr(bd: Breakdown, phase: str):  # noqa: ANN202 - PhaseAttribution | None
    return next((p for p in bd.attribution.phases if p.phase == phase), None) if bd.attribution else None


def _coverage_deltas(a: Breakdown, pa: str, b: Breakdown, pb: str) -> tuple[Delta, ...]:
    xa, xb = _phase_attr(a, pa), _phase_attr(b, pb)
    if xa is None and xb is None:
        return ()
    keys = list(dict.fromkeys([*(xa.coverage_pct if xa else {}), *(xb.coverage_pct if xb else {})]))
    return tuple(make_delta(k, "%", xa.coverage_pct.get(k) if xa else None, xb.coverage_pct.get(k) if xb else None)
                 for k in keys)


def _layer_deltas(a: Breakdown, a_ph: PhaseSummary, b: Breakdown, b_ph: PhaseSummary) -> tuple[Delta, ...]:
    xa, xb = _phase_attr(a, a_ph.phase), _phase_attr(b, b_ph.phase)
    if not (xa and xa.layers and xb and xb.layers):
        return ()
    ra, rb = {r.layer: r for r in xa.layers}, {r.layer: r for r in xb.layers}
    out = []
    for k in sorted(set(ra) | set(rb)):
        kind = (ra.get(k) or rb[k]).layer_type
        out.append(make_delta(f"layer {k} {kind}", "ms", ra[k].time_us / 1e3 / max(a_ph.steps, 1) if k in ra else None,
                              rb[k].time_us / 1e3 / max(b_ph.steps, 1) if k in rb else None))
    return tuple(out)


def diff_breakdowns(a: Breakdown, b: Breakdown, *, order_a: KernelOrder | None = None,
                    order_b: KernelOrder | None = None,
                    labels: tuple[str, str] | None = None) -> BreakdownDiff:
    """Compare B against A. Pure. ``order_*`` (from ``load_side``) enable order-in-step kernel matching;
    ``labels`` name the inputs in reports (default: the trace file names)."""
    pa = {p.phase: p for p in a.phases}
    pb = {p.phase: p for p in b.phases}
    pairs = [(k, k) for k in pa if k in pb]
    notes = []
    if not pairs and len(pa) == len(pb) == 1 and "unknown" in (*pa, *pb):
        # One side has no token counts (no step markers): its steps are the other side's only phase.
        pairs = [(next(iter(pa)), next(iter(pb)))]
        notes.append(f"A's {pairs[0][0]} steps compared with B's {pairs[0][1]} steps: one side's steps carry no "
                     "token counts, so their phase is unknown")
    phases = tuple(diff_phase(pa[ka], pb[kb], a_bd=a, b_bd=b,
                              order_a=None if order_a is None else order_a.get(ka, {}),
                              order_b=None if order_b is None else order_b.get(kb, {}))
                   for ka, kb in pairs)
    ta, tb = clean_timings(a.capture), clean_timings(b.capture)
    timings = tuple(make_delta(k, "ms", ta.get(k), tb.get(k)) for k in TIMING_METRICS if k in ta or k in tb)
    used_a, used_b = {ka for ka, _ in pairs}, {kb for _, kb in pairs}
    return BreakdownDiff(
        a=_side(a, labels[0] if labels else None), b=_side(b, labels[1] if labels else None),
        comparability=comparability(a, b), timings=timings, phases=phases,
        only_in_a=tuple(k for k in pa if k not in used_a), only_in_b=tuple(k for k in pb if k not in used_b),
        notes=tuple(notes))
