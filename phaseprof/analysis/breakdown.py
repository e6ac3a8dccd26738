"""Trace tables -> steps -> classified items -> per-step rows and per-phase summaries (a Breakdown)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd

from phaseprof import __version__
from phaseprof.analysis import intervals as iv
from phaseprof.analysis.attribution import summarize as summarize_attribution
from phaseprof.analysis.phase_infer import infer_mode
from phaseprof.analysis.prepare import Prepared
from phaseprof.analysis.results import (AllocCounts, BucketTime, Breakdown, IdleSplit, KernelStat, LaunchCounts,
                                        PhaseSummary, Stats, StepRow, TraceInfo)
from phaseprof.analysis.steps import StepDetection, StepPhase, assign_to_steps
from phaseprof.classify.buckets import Bucket
from phaseprof.columns import EventKind
from phaseprof.analysis.window import HostCalls, step_bounds_of
from phaseprof.defaults import GRAPH_LAUNCH_APIS, SCHEMA_VERSION, TOP_KERNELS_PER_BUCKET
from phaseprof.trace.tables import EventTables, labels

_US = 1e-3  # ns -> us


def _stats(values: list[float]) -> Stats:
    a = np.asarray(values, dtype=np.float64)
    if a.size == 0:
        return Stats(0.0, 0.0, 0.0, 0.0, 0.0)
    return Stats(float(a.mean()), float(np.percentile(a, 50)), float(np.percentile(a, 90)), float(a.min()),
                 float(a.max()))


def _bucket_times(items: pd.DataFrame, col: str, busy_ns: float) -> list[BucketTime]:
    if items.empty:
        return []
    g = items.groupby(col, observed=True)["share_ns"].agg(["sum", "size"]).sort_values("sum", ascending=False)
    return [BucketTime(str(b), float(r["sum"]) * _US, 100.0 * float(r["sum"]) / busy_ns if busy_ns else 0.0,
                       int(r["size"])) for b, r in g.iterrows()]


def _kernel_stats(items: pd.DataFrame, busy_ns: float, limit: int | None) -> list[KernelStat]:
    """Per kernel (name, kernel bucket): GPU time, count and most frequent module bucket, longest first.

    Vectorised: kernels are numbered in the order ``groupby(["name", "kernel_bucket"])`` lists them (name category
    order, then bucket; null keys dropped), times are summed by pandas (its compensated sum), and each kernel's
    module is its most frequent one, ties going to the one seen first (what ``Counter.most_common`` picked).
    """
    if items.empty:
        return []
    name_code = items["name"].cat.codes.to_numpy().astype(np.int64)
    bucket_code, buckets = pd.factorize(items["kernel_bucket"], sort=True)
    ok = (name_code >= 0) & (bucket_code >= 0)
    if not ok.any():
        return []
    keys, kernel = np.unique((name_code * len(buckets) + bucket_code)[ok], return_inverse=True)
    share_ns = pd.Series(items["share_ns"].to_numpy()[ok]).groupby(kernel).sum().to_numpy()
    module, modules = pd.factorize(items["module_bucket"].to_numpy()[ok], use_na_sentinel=False)
    pairs, first_row, n = np.unique(kernel * len(modules) + module, return_index=True, return_counts=True)
    order = np.lexsort((first_row, -n, pairs // len(modules)))
    lead = np.r_[True, np.diff(pairs[order] // len(modules)) != 0]
    g = pd.DataFrame({"time": share_ns, "count": np.bincount(kernel),
                      "module": np.asarray(modules, dtype=object)[pairs[order][lead] % len(modules)]})
    g = g.sort_values("time", ascending=False)
    if limit:
        g = g.head(limit)
    names = items["name"].cat.categories
    return [KernelStat(str(names[k // len(buckets)]), str(buckets[k % len(buckets)]), str(m), int(c),
                       float(t) * _US, 100.0 * float(t) / busy_ns if busy_ns else 0.0)
            for k, t, c, m in zip(keys[g.index.to_numpy()], g["time"], g["count"], g["module"])]


class _StepContext:
    """Host-side columns shared by all steps, computed once."""

    def __init__(self, t: EventTables, det: StepDetection):
        rt = t.runtime
        self.rt_names = labels(rt["name"])
        self.rt_ts = rt["ts_ns"].to_numpy()
        self.rt_end = rt["end_ns"].to_numpy()
        self.rt_step = assign_to_steps(self.rt_ts, det.steps)
        calls = HostCalls.of(self.rt_names)
        self.is_launch, self.is_sync = calls.is_launch, calls.is_sync
        self.is_malloc, self.is_free = calls.is_malloc, calls.is_free
        mem = t.memory
        self.mem_step = assign_to_steps(mem["ts_ns"].to_numpy(), det.steps)
        self.mem_bytes = mem["bytes"].to_numpy()
        self.mem_gpu = (mem["device_type"].to_numpy() != 0) & (mem["device_id"].to_numpy() >= 0)
        # Per step, its rows (ascending) by slicing one stable sort, rather than comparing every row with each
        # step (440 steps x 1.3M calls on a 2 GB trace); the selections, and their order, are the same.
        self._rt_by_step, self._rt_step_sorted = _by_value(self.rt_step)
        self._mem_by_step, self._mem_step_sorted = _by_value(self.mem_step)
        # Launch calls by start: those that can overlap a window are a slice (starts within max duration of it).
        launch_rows = np.flatnonzero(self.is_launch)
        self._launch_by_ts = launch_rows[np.argsort(self.rt_ts[launch_rows], kind="stable")]
        self._launch_ts = self.rt_ts[self._launch_by_ts]
        self._launch_max_dur = int((self.rt_end - self.rt_ts)[launch_rows].max()) if launch_rows.size else 0

    def rt_rows(self, k: int) -> np.ndarray:
        """Runtime rows of step ``k``, ascending (what ``rt_step == k`` selects)."""
        return _rows_of(self._rt_by_step, self._rt_step_sorted, k)

    def mem_rows(self, k: int) -> np.ndarray:
        """Allocator rows of step ``k``, ascending."""
        return _rows_of(self._mem_by_step, self._mem_step_sorted, k)

    def launches_overlapping(self, start: int, end: int) -> np.ndarray:
        """Launch-call rows with ``ts < end`` and ``end > start``, ascending (what the masks over all calls give)."""
        lo = np.searchsorted(self._launch_ts, start - self._launch_max_dur, side="left")
        hi = np.searchsorted(self._launch_ts, end, side="left")
        cand = self._launch_by_ts[lo:hi]
        return np.sort(cand[self.rt_end[cand] > start])


def _by_value(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(values, kind="stable")
    return order, values[order]


def _rows_of(order: np.ndarray, sorted_values: np.ndarray, k: int) -> np.ndarray:
    lo, hi = np.searchsorted(sorted_values, [k, k + 1], side="left")
    return order[lo:hi]


def _idle_split(work: "GpuWork", start: int, end: int, ctx: _StepContext) -> IdleSplit:
    """Split the GPU's idle time inside ``[start, end)`` by cause (see IdleSplit). Idle means no activity of
    any step ran; the activity that ends a gap tells whether its launch call was still in progress."""
    gs, ge, starved_end = work.idle_gaps(start, end, ctx.rt_end)
    if gs.size == 0:
        return IdleSplit(0.0, 0.0, 0.0)
    sel = ctx.launches_overlapping(start, end)
    in_launch = iv.overlap_with_union(gs, starved_end, ctx.rt_ts[sel], ctx.rt_end[sel])
    starved = starved_end - gs
    return IdleSplit(float(in_launch.sum()) * _US, float((starved - in_launch).sum()) * _US,
                     float((ge - starved_end).sum()) * _US)


class GpuWork:
    """Every in-step GPU interval sorted by start, to find what ran inside a step's window from any step."""

    def __init__(self, items: pd.DataFrame):
        order = np.argsort(items["ts_ns"].to_numpy(), kind="stable")
        self.ts = items["ts_ns"].to_numpy()[order]
        self.end = items["end_ns"].to_numpy()[order]
        self.launch = items["launch"].to_numpy()[order]
        self.max_dur = int((self.end - self.ts).max()) if self.ts.size else 0

    def window(self, start: int, end: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Intervals (sorted by start) that overlap ``[start, end)``, with their launch rows."""
        lo = np.searchsorted(self.ts, start - self.max_dur, side="left")
        hi = np.searchsorted(self.ts, end, side="left")
        keep = self.end[lo:hi] > start
        return self.ts[lo:hi][keep], self.end[lo:hi][keep], self.launch[lo:hi][keep]

    def idle_gaps(self, start: int, end: int, call_end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Idle gaps ``[gs, ge)`` inside ``[start, end)`` (no activity of any step ran) and, per gap, the end of
        the part where the GPU was starved: the work that ended the gap had not been launched yet, i.e. its
        launch call (``call_end`` = end ns of every runtime row) was still in progress. A gap with no work after
        it (the tail) is not starved."""
        its, ite, launch = self.window(start, end)
        gs, ge = iv.gaps(its, ite, start, end)
        nxt = np.searchsorted(its, ge, side="left")
        has_next = nxt < its.size
        nl = launch[np.minimum(nxt, its.size - 1)] if its.size else np.zeros(gs.size, dtype=np.int64)
        launched_at = np.where(has_next & (nl >= 0), call_end[np.maximum(nl, 0)] if call_end.size else 0, gs)
        return gs, ge, np.where(has_next, np.clip(launched_at, gs, ge), gs)

    def union_in(self, start: int, end: int) -> int:
        ts, te, _ = self.window(start, end)
        return iv.total(*iv.clip(ts, te, start, end))


def _per_step_views(items: pd.DataFrame) -> dict[str, dict[int, dict[str, float]]]:
    """Per view column, per step: bucket -> µs, in bucket category order. One groupby over all steps: the same
    group sums (rows in the same order) as one groupby per step, without the per-step pandas overhead."""
    out: dict[str, dict[int, dict[str, float]]] = {}
    for col in ("kernel_bucket", "module_bucket"):
        per: dict[int, dict[str, float]] = {}
        if len(items):
            sums = items.groupby(["step", col], observed=True)["share_ns"].sum()
            for (k, b), v in sums.items():
                per.setdefault(int(k), {})[str(b)] = float(v) * _US
        out[col] = per
    return out


class _ItemColumns:
    """The work items' columns as arrays, and each step's rows (ascending, as ``groupby("step").indices``) from
    one stable sort: a step reads its slice of arrays, not a DataFrame of its own (issue 22: 200k steps)."""

    def __init__(self, items: pd.DataFrame):
        self.ts, self.end = items["ts_ns"].to_numpy(), items["end_ns"].to_numpy()
        self.launch, self.share_ns = items["launch"].to_numpy(), items["share_ns"].to_numpy()
        kinds = labels(items["kind"])
        self.is_kernel, self.is_memcpy = kinds == EventKind.KERNEL, kinds == EventKind.MEMCPY
        self.is_memset, self.bytes = kinds == EventKind.MEMSET, items["bytes"].to_numpy()
        self._by_step, self._step_sorted = _by_value(items["step"].to_numpy())

    def rows(self, k: int) -> np.ndarray:
        return _rows_of(self._by_step, self._step_sorted, k)


def _step_row(k: int, det: StepDetection, rows_k: np.ndarray, cols: _ItemColumns, ctx: _StepContext, device: str,
              work: GpuWork, views: dict[str, dict[int, dict[str, float]]]) -> StepRow:
    sw = det.steps[k]
    start, end = step_bounds_of(sw.host_start_ns, sw.host_end_ns, cols.ts[rows_k], cols.end[rows_k],
                                cols.launch[rows_k], ctx.rt_ts)
    wall = max(end - start, 0)
    busy = int(round(float(cols.share_ns[rows_k].sum())))  # this step's share of GPU busy (StepRow.gpu_busy_us)
    any_busy = work.union_in(start, end) if device == "gpu" else busy
    other_steps = max(any_busy - busy, 0)
    if device == "gpu":
        idle = _idle_split(work, start, end, ctx)
    else:
        idle = IdleSplit(0.0, float(wall - busy) * _US, 0.0)
    rows = ctx.rt_rows(k)
    api_counts = Counter(ctx.rt_names[rows[ctx.is_launch[rows]]].tolist())
    graph = sum(v for a, v in api_counts.items() if a in GRAPH_LAUNCH_APIS)
    m = ctx.mem_rows(k)
    mb = ctx.mem_bytes[m]
    kern, mcpy, mset, byts = cols.is_kernel[rows_k], cols.is_memcpy[rows_k], cols.is_memset[rows_k], cols.bytes[rows_k]
    return StepRow(
        index=k, label=sw.label, phase=str(sw.phase), context_tokens=sw.context_tokens,
        generation_tokens=sw.generation_tokens, start_us=float(start) * _US, wall_us=float(wall) * _US,
        gpu_busy_us=float(busy) * _US, gpu_idle_us=float(max(wall - any_busy, 0)) * _US,
        gpu_busy_other_steps_us=float(other_steps) * _US,
        busy_pct=100.0 * busy / wall if wall else 0.0, idle=idle,
        host_sync_us=float((ctx.rt_end[rows] - ctx.rt_ts[rows])[ctx.is_sync[rows]].sum()) * _US,
        kernels=int(kern.sum()) if device == "gpu" else int(rows_k.size),
        memcpy_count=int(mcpy.sum()), memcpy_bytes=int(byts[mcpy].sum()),
        memset_count=int(mset.sum()), memset_bytes=int(byts[mset].sum()),
        launches=LaunchCounts(total=int(sum(api_counts.values())), by_api=dict(api_counts.most_common()),
                              graph_launches=int(graph)),
        memory=AllocCounts(
            allocations=int((mb > 0).sum()), frees=int((mb < 0).sum()), alloc_bytes=int(mb[mb > 0].sum()),
            free_bytes=int(-mb[mb < 0].sum()), gpu_allocations=int(((mb > 0) & ctx.mem_gpu[m]).sum()),
            cpu_allocations=int(((mb > 0) & ~ctx.mem_gpu[m]).sum()),
            device_mallocs=int(ctx.is_malloc[rows].sum()), device_frees=int(ctx.is_free[rows].sum())),
        kernel_view_us=dict(views["kernel_bucket"].get(k, {})),
        module_view_us=dict(views["module_bucket"].get(k, {})),
    )


_PER_STEP_METRICS = {
    "wall_us": lambda r: r.wall_us, "gpu_busy_us": lambda r: r.gpu_busy_us, "gpu_idle_us": lambda r: r.gpu_idle_us,
    "busy_pct": lambda r: r.busy_pct, "launch_overhead_us": lambda r: r.idle.launch_overhead_us,
    "host_work_us": lambda r: r.idle.host_work_us, "kernels": lambda r: r.kernels,
    "launch_calls": lambda r: r.launches.total, "graph_launches": lambda r: r.launches.graph_launches,
    "allocations": lambda r: r.memory.allocations, "gpu_allocations": lambda r: r.memory.gpu_allocations,
    "device_mallocs": lambda r: r.memory.device_mallocs, "memcpy_count": lambda r: r.memcpy_count,
}


#: The item columns a phase summary reads: it gets a copy of only these (the phase's rows of all 14 columns were
#: the analysis' largest transient, ~13 MB on an 80K-kernel trace, then copied again per bucket).
_PHASE_SUMMARY_COLUMNS = ["name", "kernel_bucket", "module_bucket", "share_ns"]


def _phase_summary(phase: str, rows: list[StepRow], items: pd.DataFrame) -> PhaseSummary:
    busy_ns = float(items["share_ns"].sum())
    top: dict[str, list[KernelStat]] = {}
    for b, sub in items.groupby("kernel_bucket", observed=True):
        top[str(b)] = _kernel_stats(sub, busy_ns, TOP_KERNELS_PER_BUCKET)
    return PhaseSummary(
        phase=phase, steps=len(rows), wall_us=sum(r.wall_us for r in rows),
        gpu_busy_us=sum(r.gpu_busy_us for r in rows), gpu_idle_us=sum(r.gpu_idle_us for r in rows),
        idle=IdleSplit(sum(r.idle.launch_overhead_us for r in rows), sum(r.idle.host_work_us for r in rows),
                       sum(r.idle.other_us for r in rows)),
        kernels=sum(r.kernels for r in rows),
        kernel_view=_bucket_times(items, "kernel_bucket", busy_ns),
        module_view=_bucket_times(items, "module_bucket", busy_ns),
        top_kernels=top,
        per_step={k: _stats([f(r) for r in rows]) for k, f in _PER_STEP_METRICS.items()},
    )


def summarize(t: EventTables, prep: Prepared) -> Breakdown:
    """Per-step rows and per-phase summaries of prepared work items (the second half of the pipeline)."""
    device, det, items = prep.device, prep.detection, prep.items
    ctx = _StepContext(t, det)
    cols = _ItemColumns(items)
    work = GpuWork(items)
    views = _per_step_views(items)
    rows = [_step_row(k, det, cols.rows(k), cols, ctx, device, work, views) for k in range(len(det.steps))]
    notes = list(det.notes)
    phases = []
    for ph in (StepPhase.PREFILL, StepPhase.MIXED, StepPhase.DECODE, StepPhase.UNKNOWN):
        sel = [r for r in rows if r.phase == ph.value]
        if sel:
            idx = {r.index for r in sel}
            phases.append(_phase_summary(ph.value, sel, items.loc[items["step"].isin(idx).to_numpy(),
                                                                  _PHASE_SUMMARY_COLUMNS]))
    if device == "gpu":
        all_busy = iv.total(t.gpu["ts_ns"].to_numpy(), t.gpu["end_ns"].to_numpy())
        outside = len(t.gpu) - len(items)
        if outside:
            notes.append(f"{outside} GPU activities lie outside the detected steps and are not in any phase")
    else:
        all_busy = float(items["share_ns"].sum())
        notes.append("CPU-only trace: CPU ops are the work items; 'busy' is CPU op time (self times)")
    comm = (items["kernel_bucket"] == Bucket.COMMUNICATION).to_numpy()
    its, ite = items["ts_ns"].to_numpy(), items["end_ns"].to_numpy()
    comm_busy = iv.total(its[comm], ite[comm]) if device == "gpu" else 0
    cs, ce = iv.union(its[comm], ite[comm])
    comm_overlap = int(iv.overlap_with_union(cs, ce, its[~comm], ite[~comm]).sum()) if comm.any() else 0
    unknown = _kernel_stats(items[items["kernel_bucket"] == Bucket.UNKNOWN], float(items["share_ns"].sum()), None)
    props = next((p for p in t.meta.device_properties if p.get("name") == t.meta.gpu_name),
                 t.meta.device_properties[0] if t.meta.device_properties else {})
    return Breakdown(
        schema_version=SCHEMA_VERSION, tool={"name": "phaseprof", "version": __version__},
        trace=TraceInfo(path=t.meta.path, sha256=t.meta.sha256, decompressed_bytes=t.meta.decompressed_bytes,
                        event_count=t.meta.event_count, platform=t.meta.platform, device=device,
                        gpu_name=t.meta.gpu_name, gpu_properties=dict(props), versions=t.meta.versions,
                        distributed=t.meta.distributed),
        step_detection={"method": det.method, "detail": det.detail},
        totals={"gpu_busy_us": float(all_busy) * _US, "gpu_activities": float(len(t.gpu)),
                "kernels": float((t.gpu["kind"] == EventKind.KERNEL).sum()) if device == "gpu" else float(len(items)),
                "in_steps_busy_us": float(items["share_ns"].sum()) * _US, "steps": float(len(rows)),
                # communication kernels' union, and how much of it ran while compute kernels ran too
                "communication_busy_us": float(comm_busy) * _US,
                "communication_overlapped_us": float(comm_overlap) * _US},
        phases=phases, steps=rows, unknown_kernels=unknown, notes=notes, capture=t.meta.capture,
        attribution=_attribution(prep, rows, t, notes),
    )


def _attribution(prep, rows: list[StepRow], t: EventTables, notes: list[str]):  # noqa: ANN001, ANN202
    """The optional attribution section (coverage by method, layers, inferred phases and mode)."""
    by_phase: dict[str, set[int]] = {}
    for r in rows:
        by_phase.setdefault(r.phase, set()).add(r.index)
    if prep.empty_steps_dropped:
        notes.append(f"{prep.empty_steps_dropped} empty step(s) dropped (no tokens or no work): not a phase")
    if prep.attribution is not None:
        notes.extend(prep.attribution.notes)
    mode = infer_mode(t, prep.items, prep.detection, prep.device)
    return summarize_attribution(prep.items, by_phase, prep.attribution, mode=mode, inferred=list(prep.inferred_phases),
                     dropped=prep.empty_steps_dropped)
