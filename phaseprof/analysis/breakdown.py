"""Trace tables -> steps -> classified items -> per-step rows and per-phase summaries (a Breakdown)."""

from __future__ import annotations

from operator import attrgetter

import numpy as np
import pandas as pd

from phaseprof import __version__
from phaseprof.analysis import intervals as iv
from phaseprof.analysis.attribution import summarize as summarize_attribution
from phaseprof.analysis.grouped import group_sums, rows_in_steps
from phaseprof.analysis.phase_infer import infer_mode
from phaseprof.analysis.prepare import Prepared
from phaseprof.analysis.results import (AllocCounts, BucketTime, Breakdown, IdleSplit, KernelStat, LaunchCounts,
                                        PhaseSummary, Stats, StepRow, ToolInfo, TraceInfo)
from phaseprof.analysis.steps import StepDetection, StepPhase, assign_to_steps
from phaseprof.classify.buckets import Bucket
from phaseprof.columns import EventKind
from phaseprof.analysis.window import HostCalls, step_bounds_all
from phaseprof.defaults import GRAPH_LAUNCH_APIS, SCHEMA_VERSION, TOP_KERNELS_PER_BUCKET
from phaseprof.trace.tables import EventTables, label_in, labels

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
    if isinstance(items[col].dtype, pd.CategoricalDtype):  # the item columns: always
        return _bucket_times_by_code(items, col, busy_ns)
    g = items.groupby(col, observed=True)["share_ns"].agg(["sum", "size"]).sort_values("sum", ascending=False)
    return [BucketTime(str(b), float(r["sum"]) * _US, 100.0 * float(r["sum"]) / busy_ns if busy_ns else 0.0,
                       int(r["size"])) for b, r in g.iterrows()]


def _bucket_times_by_code(items: pd.DataFrame, col: str, busy_ns: float) -> list[BucketTime]:
    """:func:`_bucket_times` of a categorical column from its codes: the same group sums (pandas' compensated sum
    over each bucket's rows in row order) and the same sort of them, without a frame per call."""
    code = items[col].cat.codes.to_numpy()
    cats = items[col].cat.categories
    count = np.bincount(code + 1, minlength=len(cats) + 1)[1:]  # null buckets (-1) are no group
    present = np.flatnonzero(count)  # the observed buckets, in category order
    size = count[present]
    t = group_sums(items["share_ns"].to_numpy(), code, len(cats))[present]
    order = pd.Series(t).sort_values(ascending=False).index.to_numpy()  # the frame's sort_values("sum"): nargsort
    names = [str(cats[c]) for c in present[order].tolist()]
    return [BucketTime(b, float(x) * _US, 100.0 * float(x) / busy_ns if busy_ns else 0.0, int(k))
            for b, x, k in zip(names, t[order].tolist(), size[order].tolist())]


def _top_kernels(items: pd.DataFrame, busy_ns: float, limit: int | None) -> dict[str, list[KernelStat]]:
    """``{str(b): _kernel_stats(sub, busy_ns, limit) for b, sub in items.groupby("kernel_bucket", observed=True)}``
    from one pass over all buckets (a frame and a dozen pandas calls per bucket were a third of the
    analysis at 117 MB). A kernel is a (name, bucket) pair, so its rows, and their order, are the same in its
    bucket's frame as in all rows: the same compensated sums, counts, modules and first rows; each bucket's
    kernels come in name order, as in its frame, and are sorted by the same sort."""
    if items.empty:
        return {}
    kb = items["kernel_bucket"]
    bcode = kb.cat.codes.to_numpy().astype(np.int64)
    bcats = kb.cat.categories
    nb = max(len(bcats), 1)
    name_code = items["name"].cat.codes.to_numpy().astype(np.int64)
    ok = (name_code >= 0) & (bcode >= 0)
    present = np.flatnonzero(np.bincount(bcode[bcode >= 0], minlength=len(bcats)))  # the observed buckets
    out: dict[str, list[KernelStat]] = {str(bcats[b]): [] for b in present.tolist()}
    if not ok.any():
        return out
    keys, kernel = _unique((name_code * nb + bcode)[ok], inverse=True)
    count = np.bincount(kernel)
    share_ns = group_sums(items["share_ns"].to_numpy()[ok], kernel, count.size)
    module, modules = _codes(items["module_bucket"], ok)
    nm = len(modules)
    pairs, first_row, n = _unique(kernel * nm + module, index=True, counts=True)
    order = np.lexsort((first_row, -n, pairs // nm))
    lead = np.r_[True, np.diff(pairs[order] // nm) != 0]
    top_module = np.asarray(modules, dtype=object)[pairs[order][lead] % nm]  # per kernel
    names = items["name"].cat.categories
    of_bucket = keys % nb
    for b in present.tolist():
        sel = np.flatnonzero(of_bucket == b)  # this bucket's kernels, in name order
        if sel.size == 0:
            continue
        t = share_ns[sel]
        by_time = pd.Series(t).sort_values(ascending=False).index.to_numpy()  # the frame's sort_values("time")
        if limit:
            by_time = by_time[:limit]
        bname = str(bcats[b])
        out[bname] = [KernelStat(str(names[k // nb]), bname, str(m), int(c), float(x) * _US,
                                 100.0 * float(x) / busy_ns if busy_ns else 0.0)
                      for k, x, c, m in zip(keys[sel][by_time].tolist(), t[by_time].tolist(),
                                            count[sel][by_time].tolist(), top_module[sel][by_time].tolist())]
    return out


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
    keys, kernel = _unique((name_code * len(buckets) + bucket_code)[ok], inverse=True)
    share_ns = group_sums(items["share_ns"].to_numpy()[ok], kernel, keys.size)
    module, modules = _codes(items["module_bucket"], ok)
    pairs, first_row, n = _unique(kernel * len(modules) + module, index=True, counts=True)
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


def _unique(v: np.ndarray, *, index: bool = False, inverse: bool = False, counts: bool = False) -> tuple:
    """``np.unique(v, return_index=..., return_inverse=..., return_counts=...)`` (at least one of them asked for);
    for non-negative integers of a range about as large as ``v`` at most (kernel and module numbers: always), by
    counting instead of sorting."""
    if v.size == 0 or v.min() < 0 or int(v.max()) >= 4 * v.size + (1 << 16):
        return np.unique(v, return_index=index, return_inverse=inverse, return_counts=counts)
    cnt = np.bincount(v)
    present = cnt > 0
    keys = np.flatnonzero(present)
    out = [keys]
    if index:  # each value's first row
        first = np.full(cnt.size, v.size, dtype=np.int64)
        np.minimum.at(first, v, np.arange(v.size))
        out.append(first[keys])
    if inverse:
        out.append((np.cumsum(present) - 1)[v])
    if counts:
        out.append(cnt[keys])
    return tuple(out)


def _codes(col: pd.Series, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """An integer per selected row naming its value, and the values (null as a value of its own): a categorical's
    codes as they are (its values never turned into one Python object per row), else ``pd.factorize``."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        values = np.empty(len(col.cat.categories) + 1, dtype=object)
        values[:-1] = np.asarray(col.cat.categories, dtype=object)
        values[-1] = np.nan
        codes = col.cat.codes.to_numpy()[rows].astype(np.int64)
        codes[codes < 0] = len(values) - 1
        return codes, values
    return pd.factorize(col.to_numpy()[rows], use_na_sentinel=False)


def _label_ids(col: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the index of its label (``trace.tables.labels``: a null is "") among the distinct labels, and those
    labels; equal labels share one index."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        lab = np.empty(len(col.cat.categories) + 1, dtype=object)
        lab[0] = ""
        lab[1:] = [str(c) for c in col.cat.categories]
        same, names = pd.factorize(lab)
        return same[col.cat.codes.to_numpy().astype(np.int64) + 1], np.asarray(names, dtype=object)
    ids, names = pd.factorize(labels(col))
    return ids, np.asarray(names, dtype=object)


class _StepContext:
    """Host-side columns shared by all steps, computed once."""

    def __init__(self, t: EventTables, det: StepDetection):
        rt = t.runtime
        # API names as ids into the distinct names (one Python string per call, 1.3M at 2 GB, was built
        # and hashed twice: for the call kinds and for the launch counts)
        self.rt_name_id, self.api_names = _label_ids(rt["name"])
        if len(self.api_names) < 1 << 15:  # a few API names: 2 bytes a call, not 8
            self.rt_name_id = self.rt_name_id.astype(np.int16)
        self.rt_ts = rt["ts_ns"].to_numpy()
        self.rt_end = rt["end_ns"].to_numpy()
        self.rt_step = assign_to_steps(self.rt_ts, det.steps)
        calls = HostCalls.of_ids(self.rt_name_id, self.api_names)
        self.is_launch, self.is_sync = calls.is_launch, calls.is_sync
        self.is_malloc, self.is_free = calls.is_malloc, calls.is_free
        mem = t.memory
        self.mem_step = assign_to_steps(mem["ts_ns"].to_numpy(), det.steps)
        self.mem_bytes = mem["bytes"].to_numpy()
        self.mem_gpu = (mem["device_type"].to_numpy() != 0) & (mem["device_id"].to_numpy() >= 0)


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
    out: dict[str, dict[int, dict[str, float]]] = {col: {} for col in ("kernel_bucket", "module_bucket")}
    if not len(items):
        return out
    step = items["step"].to_numpy()
    share = items["share_ns"].to_numpy()
    # (step, bucket) as one integer key, in the same order (steps from -1 up, then category order): pandas groups
    # one key much faster than a categorical pair, and a dense key as codes (group_sums) faster still; the same
    # sums (its compensated sum over each group's rows in row order); buckets without a category (null) are
    # dropped, as the pair dropped them. One step part for both columns (any bucket count as large as either's
    # keeps the order).
    cats = {col: items[col].cat.categories for col in out}
    nc = max(max(len(c) for c in cats.values()), 1)
    base = step + 1
    base *= nc
    n_keys = (int(step.max()) + 2) * nc
    for col, per in out.items():
        code = items[col].cat.codes.to_numpy()
        key = base + code
        null = code < 0
        if null.any():
            key[null] = -1
        del null
        if n_keys <= 4 * key.size + (1 << 16):  # keys about as many as items at most: all groups at once
            present = np.flatnonzero(np.bincount(key + 1, minlength=n_keys + 1)[1:])
            sums = pd.Series(group_sums(share, key, n_keys)[present], index=present)
        else:
            ok = key >= 0
            sums = pd.Series(share[ok]).groupby(key[ok]).sum()
            del ok
        del key
        names = [str(c) for c in cats[col]]
        for k, v in zip(sums.index.tolist(), sums.to_numpy().tolist()):
            per.setdefault(k // nc - 1, {})[names[k % nc]] = v * _US
    return out


class _Groups:
    """Rows grouped by step from one stable sort: group ``k`` holds the rows with step ``k``, ascending (what
    ``step == k`` selects); rows of no step (-1) are in none. Reductions of every group at once (a loop
    over 200k steps ran for minutes), exact: integer sums by ``np.add.reduceat``, float sums as ``np.sum`` of each group's rows."""

    def __init__(self, step: np.ndarray, n: int):
        self.n = n
        # Rows already by step (the rule: items, calls and gaps come in time order): the grouped rows are one
        # stretch, and ``of`` a view of it instead of a permuted copy of every column (memory, time)
        if step.size < 2 or bool((step[1:] >= step[:-1]).all()):
            off = np.searchsorted(step, np.arange(n + 1), side="left")
            self.rows: np.ndarray | slice = slice(int(off[0]), int(off[-1]))
        else:
            order = np.argsort(step, kind="stable")
            off = np.searchsorted(step[order], np.arange(n + 1), side="left")
            self.rows = order[off[0]:off[-1]]
        self.off = off - off[0]  # grouped rows, group k at [off[k], off[k+1])
        self.size = np.diff(self.off)

    def of(self, values: np.ndarray) -> np.ndarray:
        """``values`` of the grouped rows, in group order (a view where they are one stretch: read it only)."""
        return np.asarray(values)[self.rows]

    def reduce(self, ufunc: np.ufunc, values: np.ndarray, empty: int) -> np.ndarray:
        """``ufunc`` over each group's values (already in group order); ``empty`` for a group without rows."""
        out = np.full(self.n, empty, dtype=values.dtype)
        nz = self.size > 0
        if nz.any():
            out[nz] = ufunc.reduceat(values, self.off[:-1][nz])
        return out

    def sum(self, values: np.ndarray) -> np.ndarray:
        return self.reduce(np.add, values, 0)

    def count(self, mask: np.ndarray) -> np.ndarray:
        return self.sum(mask.astype(np.int64))

    def float_sum(self, values: np.ndarray) -> np.ndarray:
        """Each group's ``np.sum`` (pairwise summation: only groups of two or more rows are summed one by one)."""
        out = np.zeros(self.n, dtype=np.float64)
        one = self.size == 1
        out[one] = values[self.off[:-1][one]]
        for k in np.flatnonzero(self.size > 1).tolist():
            out[k] = values[self.off[k]:self.off[k + 1]].sum()
        return out


#: Union gaps handled at once by :func:`_idle_splits`: its per-gap columns (a few, one entry per union piece, about
#: one per kernel) are this long at most instead of all of a trace's at once (they were the analysis' peak
#: at 117 MB).
_GAP_BLOCK = 1 << 14


def _idle_splits(work: GpuWork, start: np.ndarray, end: np.ndarray, ctx: _StepContext
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """Every step's GPU idle time inside its ``[start, end)`` split by cause (see IdleSplit), in ns, the GPU
    busy time of any step there, and the length of the work's union (``intervals.total`` of it). Idle means no
    activity of any step ran; the activity that ends a gap tells whether its launch call was still in progress
    (what ``GpuWork.idle_gaps`` finds window by window).

    A window meeting union pieces ``[i0, i1)`` has a head gap (window start to piece ``i0``), the union's own gaps
    between its pieces, and a tail gap (piece ``i1 - 1`` to the window end; nothing starts after it inside the
    window: never starved). The union's own gaps are the same in every window that holds them, so each is split
    once and a window's sum is a difference of their running sums (enumerating every window's gaps
    again, with a search per gap, was a sixth of the analysis at 2.1 GB); the sums are of integers, exact in any
    order."""
    # the launch calls' union first (its temporaries before the work's union exists), from copies it may overwrite
    in_launches = iv.Merged(*iv.union(ctx.rt_ts[ctx.is_launch], ctx.rt_end[ctx.is_launch], own=True))
    # per union piece, the work that opens it: the first starting at or after its start, whose launch tells when
    # a gap ending there stopped being starved (the union's own rows, but where some work is empty)
    if bool((work.end > work.ts).all()):
        us, ue, opens = iv.union_first(work.ts, work.end)
    else:
        us, ue = iv.union(work.ts, work.end)
        opens = np.searchsorted(work.ts, us, side="left")
    w_launch = work.launch
    del work  # its starts and ends: not needed past here (the caller hands the work over without keeping it)
    opens_launch = w_launch[opens]
    del w_launch, opens
    live = end > start
    # union pieces meeting each window: [i0, i1)
    i0 = np.searchsorted(ue, start, side="right")
    i1 = np.searchsorted(us, end, side="left")
    m = np.where(live, np.maximum(i1 - i0, 0), 0)
    out = np.zeros((3, start.size), dtype=np.int64)
    # no piece: the whole window, with nothing after it
    out[2] = np.where(live & (m == 0), end - start, 0)
    one = np.flatnonzero(m > 0)
    if one.size:
        first = i0[one]
        head_end = np.maximum(us[first], start[one])
        out[:, one] += _starved_split(start[one], head_end, opens_launch[first], ctx.rt_end, in_launches)
        out[2, one] += np.maximum(end[one] - np.minimum(ue[i1[one] - 1], end[one]), 0)  # the tail
    # the union's own gaps: gap p is [ue[p - 1], us[p]); window k holds those of p in (i0, i1), whose sum is
    # run[i1 - 1] - run[i0] with run[q] the sum over p <= q (0 below p = 1)
    two = np.flatnonzero(m > 1)
    if two.size:
        at = np.concatenate([i0[two], i1[two] - 1])
        order = np.argsort(at, kind="stable")
        at_sorted = at[order]
        run = np.zeros((3, at.size), dtype=np.int64)
        carry = np.zeros((3, 1), dtype=np.int64)
        lo, last = max(int(at_sorted[0]), 0) + 1, int(at_sorted[-1])
        while lo <= last:  # gaps [lo, hi), _GAP_BLOCK at a time
            hi = min(lo + _GAP_BLOCK, last + 1)
            split = _starved_split(ue[lo - 1:hi - 1], us[lo:hi], opens_launch[lo:hi], ctx.rt_end, in_launches,
                                   in_order=True)
            np.cumsum(split, axis=1, out=split)
            split += carry
            a, b = np.searchsorted(at_sorted, (lo, hi), side="left")
            run[:, order[a:b]] = split[:, at_sorted[a:b] - lo]
            carry = split[:, -1:]
            lo = hi
        out[:, two] += run[:, two.size:] - run[:, :two.size]
    # busy: the rest of the window (its gaps' parts add up to the gaps: no running sum over every piece for it)
    any_busy = np.where(live, end - start - out.sum(axis=0), 0)
    return any_busy, out[0], out[1], out[2], int((ue - us).sum())


def _starved_split(gs: np.ndarray, ge: np.ndarray, launch: np.ndarray, call_end: np.ndarray,
                   in_launches: iv.Merged, in_order: bool = False) -> np.ndarray:
    """The three idle parts (in launch calls, other host work, other) of gaps ``[gs, ge)`` ended by work with launch
    row ``launch`` (-1: none), as rows: the gap is starved up to the end of that launch call (``call_end``: per
    runtime row), clipped to the gap (``ge >= gs``; an empty one is all zeros). ``in_order``: the gaps ascend
    and do not overlap (a union's own gaps), so do their starved parts."""
    launched_at = np.where(launch >= 0, call_end[np.maximum(launch, 0)] if call_end.size else 0, gs)
    starved_end = np.clip(launched_at, gs, ge, out=launched_at)
    out = np.empty((3, gs.size), dtype=np.int64)
    out[0] = in_launches.overlap(gs, starved_end, in_order=in_order)
    np.subtract(starved_end, gs, out=out[1])
    out[1] -= out[0]
    np.subtract(ge, starved_end, out=out[2])
    return out


def _launch_counts(ctx: _StepContext, n: int) -> list[LaunchCounts]:
    """Per step, its launch calls by API: most frequent first, ties in order of first call (``Counter``'s
    ``most_common``), counted for all steps at once."""
    rows = np.flatnonzero(ctx.is_launch & (ctx.rt_step >= 0) & (ctx.rt_step < n))
    code, apis = ctx.rt_name_id[rows], ctx.api_names  # api ids name the apis; the order below is by first call
    # by counting where the (step, api) pairs are about as many as the calls at most (the rule), not by sorting
    pair, first, count = _unique(ctx.rt_step[rows] * max(len(apis), 1) + code, index=True, counts=True)
    step, api = pair // max(len(apis), 1), pair % max(len(apis), 1)
    order = np.lexsort((first, -count, step))
    is_graph = np.asarray([a in GRAPH_LAUNCH_APIS for a in apis], dtype=bool)
    by_api: list[dict[str, int]] = [{} for _ in range(n)]
    names = [str(a) if isinstance(a, str) else a for a in apis]
    for k, a, c in zip(step[order].tolist(), api[order].tolist(), count[order].tolist()):
        by_api[k][names[a]] = c
    total = np.bincount(step, weights=count, minlength=n).astype(np.int64) if step.size else np.zeros(n, np.int64)
    graph = (np.bincount(step[is_graph[api]], weights=count[is_graph[api]], minlength=n).astype(np.int64)
             if step.size else np.zeros(n, np.int64))
    return [LaunchCounts(total=int(tt), by_api=d, graph_launches=int(g))
            for tt, d, g in zip(total.tolist(), by_api, graph.tolist())]


def _step_rows(det: StepDetection, items: pd.DataFrame, ctx: _StepContext, device: str,
               views: dict[str, dict[int, dict[str, float]]]) -> tuple[list[StepRow], int | None]:
    """Every step's row, and the length of the union of all items (GPU traces; else None). Each column is
    computed for all steps at once by grouped numpy operations over the items, calls and allocations sorted by
    step (200k steps ran for minutes at ~0.65 ms a step); only the rows themselves are built one by
    one."""
    n = len(det.steps)
    g = _Groups(items["step"].to_numpy(), n)
    ts, end = g.of(items["ts_ns"].to_numpy()), g.of(items["end_ns"].to_numpy())
    launch = g.of(items["launch"].to_numpy())
    has_launch = g.count(launch >= 0) > 0
    first_launch = g.reduce(np.minimum, np.where(launch >= 0, ctx.rt_ts[np.maximum(launch, 0)] if ctx.rt_ts.size
                                                 else 0, np.iinfo(np.int64).max), np.iinfo(np.int64).max)
    host_start = np.array([s.host_start_ns for s in det.steps], dtype=np.int64)
    host_end = np.array([s.host_end_ns for s in det.steps], dtype=np.int64)
    start, stop = step_bounds_all(host_start, host_end, g.reduce(np.minimum, ts, 0), g.reduce(np.maximum, end, 0),
                                  g.size > 0, first_launch, has_launch)
    share = g.float_sum(g.of(items["share_ns"].to_numpy()))
    # the kinds by category (label_in: no string per row), as ``labels(kind) == EventKind.X`` (plain values: a
    # StrEnum member hashes unlike its value)
    kind = items["kind"]
    is_memcpy = g.of(label_in(kind, (EventKind.MEMCPY.value,)))
    is_memset = g.of(label_in(kind, (EventKind.MEMSET.value,)))
    byts = np.maximum(g.of(items["bytes"].to_numpy()), 0)  # a negative size is no size: not given (summarize notes it)
    kernels = g.count(g.of(label_in(kind, (EventKind.KERNEL.value,)))) if device == "gpu" else g.size
    memcpy_count, memcpy_bytes = g.count(is_memcpy), g.sum(np.where(is_memcpy, byts, 0))
    memset_count, memset_bytes = g.count(is_memset), g.sum(np.where(is_memset, byts, 0))
    if device == "gpu":
        any_busy, launch_ns, host_ns, other_ns, union_ns = _idle_splits(GpuWork(items), start, stop, ctx)
    else:
        any_busy, union_ns = None, None
    rg = _Groups(ctx.rt_step, n)
    host_sync = rg.sum(rg.of(np.where(ctx.is_sync, ctx.rt_end - ctx.rt_ts, 0)))
    device_mallocs, device_frees = rg.count(rg.of(ctx.is_malloc)), rg.count(rg.of(ctx.is_free))
    mg = _Groups(ctx.mem_step, n)
    mb, gpu_mem = mg.of(ctx.mem_bytes), mg.of(ctx.mem_gpu)
    memory = [AllocCounts(allocations=a, frees=f, alloc_bytes=ab, free_bytes=fb, gpu_allocations=ga,
                          cpu_allocations=ca, device_mallocs=dm, device_frees=df)
              for a, f, ab, fb, ga, ca, dm, df in zip(
                  mg.count(mb > 0).tolist(), mg.count(mb < 0).tolist(), mg.sum(np.where(mb > 0, mb, 0)).tolist(),
                  (-mg.sum(np.where(mb < 0, mb, 0))).tolist(), mg.count((mb > 0) & gpu_mem).tolist(),
                  mg.count((mb > 0) & ~gpu_mem).tolist(), device_mallocs.tolist(), device_frees.tolist())]
    launches = _launch_counts(ctx, n)
    # The row's numbers as columns: the same int and float operations as one step at a time, on every step at once
    wall = np.maximum(stop - start, 0)
    busy = np.rint(share).astype(np.int64)  # this step's share of GPU busy (StepRow.gpu_busy_us); round half even
    if any_busy is None:
        any_busy = busy
        idle_cols = (np.zeros(n), (wall - busy).astype(np.float64) * _US, np.zeros(n))
    else:
        idle_cols = tuple(x.astype(np.float64) * _US for x in (launch_ns, host_ns, other_ns))
    with np.errstate(divide="ignore", invalid="ignore"):
        pct = np.where(wall != 0, 100.0 * busy.astype(np.float64) / wall.astype(np.float64), 0.0)
    us = [(x.astype(np.float64) * _US).tolist() for x in (start, wall, busy, np.maximum(wall - any_busy, 0),
                                                           np.maximum(any_busy - busy, 0), host_sync)]
    idle = [IdleSplit(a, h, o) for a, h, o in zip(*(x.tolist() for x in idle_cols))]
    cols = zip(*us, pct.tolist(), kernels.tolist(), memcpy_count.tolist(), memcpy_bytes.tolist(),
               memset_count.tolist(), memset_bytes.tolist())
    kv, mv = views["kernel_bucket"], views["module_bucket"]
    rows = []
    for k, (s_us, wall_us, busy_us, idle_us, other_us, sync_us, bp, kern, mc, mcb, ms, msb) in enumerate(cols):
        sw = det.steps[k]
        rows.append(StepRow(
            index=k, label=sw.label, phase=str(sw.phase), context_tokens=sw.context_tokens,
            generation_tokens=sw.generation_tokens, start_us=s_us, wall_us=wall_us, gpu_busy_us=busy_us,
            gpu_idle_us=idle_us, gpu_busy_other_steps_us=other_us, busy_pct=bp, idle=idle[k], host_sync_us=sync_us,
            kernels=kern, memcpy_count=mc, memcpy_bytes=mcb, memset_count=ms, memset_bytes=msb,
            launches=launches[k], memory=memory[k], kernel_view_us=dict(kv.get(k, {})),
            module_view_us=dict(mv.get(k, {}))))
    return rows, union_ns


_PER_STEP_METRICS = {k: attrgetter(a) for k, a in {
    "wall_us": "wall_us", "gpu_busy_us": "gpu_busy_us", "gpu_idle_us": "gpu_idle_us", "busy_pct": "busy_pct",
    "launch_overhead_us": "idle.launch_overhead_us", "host_work_us": "idle.host_work_us", "kernels": "kernels",
    "launch_calls": "launches.total", "graph_launches": "launches.graph_launches",
    "allocations": "memory.allocations", "gpu_allocations": "memory.gpu_allocations",
    "device_mallocs": "memory.device_mallocs", "memcpy_count": "memcpy_count",
}.items()}  # attribute getters, not lambdas: 13 per step row (a trace may have 200k steps)


#: The item columns a phase summary reads: it gets a copy of only these (the phase's rows of all 14 columns were
#: the analysis' largest transient, ~13 MB on an 80K-kernel trace, then copied again per bucket).
_PHASE_SUMMARY_COLUMNS = ["name", "kernel_bucket", "module_bucket", "share_ns"]


def _phase_summary(phase: str, rows: list[StepRow], items: pd.DataFrame) -> PhaseSummary:
    busy_ns = float(items["share_ns"].sum())
    top = _top_kernels(items, busy_ns, TOP_KERNELS_PER_BUCKET)
    return PhaseSummary(
        phase=phase, steps=len(rows), wall_us=sum(r.wall_us for r in rows),
        gpu_busy_us=sum(r.gpu_busy_us for r in rows), gpu_idle_us=sum(r.gpu_idle_us for r in rows),
        idle=IdleSplit(sum(r.idle.launch_overhead_us for r in rows), sum(r.idle.host_work_us for r in rows),
                       sum(r.idle.other_us for r in rows)),
        kernels=sum(r.kernels for r in rows),
        kernel_view=_bucket_times(items, "kernel_bucket", busy_ns),
        module_view=_bucket_times(items, "module_bucket", busy_ns),
        top_kernels=top,
        per_step={k: _stats(list(map(f, rows))) for k, f in _PER_STEP_METRICS.items()},
    )


def summarize(t: EventTables, prep: Prepared) -> Breakdown:
    """Per-step rows and per-phase summaries of prepared work items (the second half of the pipeline)."""
    device, det, items = prep.device, prep.detection, prep.items
    views = _per_step_views(items)  # first: its pandas groupbys' temporaries then come before the columns below
    ctx = _StepContext(t, det)
    rows, items_busy = _step_rows(det, items, ctx, device, views)
    del ctx, views
    notes = list(det.notes)
    phases = []
    for ph in (StepPhase.PREFILL, StepPhase.MIXED, StepPhase.DECODE, StepPhase.UNKNOWN):
        sel = [r for r in rows if r.phase == ph.value]
        if sel:
            idx = {r.index for r in sel}
            phases.append(_phase_summary(ph.value, sel, items.loc[rows_in_steps(items["step"].to_numpy(), idx),
                                                                  _PHASE_SUMMARY_COLUMNS]))
    negative = int((t.gpu["bytes"].to_numpy() < 0).sum()) if device == "gpu" else 0
    if negative:
        notes.append(f"{negative} memcpy/memset event(s) with a negative size: their bytes are not counted")
    if device == "gpu":
        outside = len(t.gpu) - len(items)
        # every GPU row an item (the rule): the items' union, measured already, is the one of all rows
        all_busy = items_busy if not outside and items_busy is not None else \
            iv.total(t.gpu["ts_ns"].to_numpy(), t.gpu["end_ns"].to_numpy())
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
        schema_version=SCHEMA_VERSION, tool=ToolInfo(name="phaseprof", version=__version__, reader=t.read_by.reader),
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
