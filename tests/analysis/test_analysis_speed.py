"""The analysis' speed-ups give exactly what the code they replaced gave: each is checked
against that code (kept here verbatim as the reference where it is gone) or against the pandas/numpy expression it
stands for, on random values, edge cases included. The committed traces' whole breakdowns are the golden tests'."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from phaseprof.analysis import breakdown as bd_mod
from phaseprof.analysis import intervals as iv
from phaseprof.analysis.breakdown import GpuWork, _Groups, _idle_splits
from phaseprof.analysis.grouped import group_sums, rows_in_steps


# --- reference: breakdown._idle_splits before the union's own gaps were split once (verbatim but for names) ---

def _old_idle_splits(work, start, end, ctx, block=1 << 14):  # noqa: ANN001, ANN202
    in_launches = iv.Merged(*iv.union(ctx.rt_ts[ctx.is_launch], ctx.rt_end[ctx.is_launch], own=True))
    w_ts, w_launch = work.ts, work.launch
    us, ue = iv.union(w_ts, work.end)
    live = end > start
    any_busy = np.where(live, iv.Merged(us, ue).overlap(start, end), 0)
    i0 = np.searchsorted(ue, start, side="right")
    i1 = np.searchsorted(us, end, side="left")
    m = np.where(live, np.maximum(i1 - i0, 0), 0)
    cand = np.where(live, m + 1, 0)
    out = np.zeros((3, start.size), dtype=np.int64)
    ends = np.cumsum(cand)
    lo = 0
    while lo < start.size:
        hi = max(int(np.searchsorted(ends, (ends[lo - 1] if lo else 0) + block, side="right")), lo + 1)
        out[:, lo:hi] = _old_gap_split(w_ts, w_launch, us, ue, start[lo:hi], end[lo:hi], i0[lo:hi], m[lo:hi],
                                       cand[lo:hi], ctx.rt_end, in_launches)
        lo = hi
    return any_busy, out[0], out[1], out[2]


def _old_gap_split(w_ts, w_launch, us, ue, start, end, i0, m, cand, call_end, in_launches):  # noqa: ANN001, ANN202
    step = np.repeat(np.arange(start.size), cand)
    j = np.arange(step.size) - np.repeat(np.cumsum(cand) - cand, cand)
    s, e = start[step], end[step]
    piece = i0[step]
    piece += j
    top = max(us.size - 1, 0)
    piece_before = np.clip(piece - 1, 0, top)
    piece_after = np.clip(piece, 0, top, out=piece)
    gs = np.where(j == 0, s, np.minimum(ue[piece_before], e) if us.size else s)
    ge = np.where(j == m[step], e, np.maximum(us[piece_after], s) if us.size else e)
    keep = ge > gs
    step, gs, ge, e = step[keep], gs[keep], ge[keep], e[keep]
    nxt = np.searchsorted(w_ts, ge, side="left")
    has_next = nxt < w_ts.size
    has_next[has_next] &= w_ts[nxt[has_next]] < e[has_next]
    nl = w_launch[np.minimum(nxt, w_ts.size - 1)] if w_ts.size else np.zeros(gs.size, dtype=np.int64)
    launched_at = np.where(has_next & (nl >= 0), call_end[np.maximum(nl, 0)] if call_end.size else 0, gs)
    starved_end = np.where(has_next, np.clip(launched_at, gs, ge), gs)
    in_launch = in_launches.overlap(gs, starved_end)
    by_step = _Groups(step, start.size)
    return np.stack([by_step.sum(by_step.of(in_launch)), by_step.sum(by_step.of(starved_end - gs - in_launch)),
                     by_step.sum(by_step.of(ge - starved_end))])


def _random_case(rng: np.random.Generator) -> tuple[GpuWork, np.ndarray, np.ndarray, SimpleNamespace]:
    """Work on a few streams (overlapping, touching, zero-length), launch calls (some work launched by none, some
    calls no launch), and step windows that overlap, nest, are empty or inverted, or hold no work."""
    n_calls = int(rng.integers(0, 60))
    span = int(rng.integers(10, 3000))
    rt_ts = np.sort(rng.integers(0, span, n_calls))
    rt_end = rt_ts + rng.integers(0, 40, n_calls)
    is_launch = rng.random(n_calls) < 0.8
    n_work = int(rng.integers(0, 80))
    ts = rng.integers(0, span + 50, n_work)
    empty = 0.1 if rng.random() < 0.5 else 0.0  # empty work: or none (the union's own opening rows)
    dur = rng.integers(1, 60, n_work) * (rng.random(n_work) >= empty)
    launch = rng.integers(-1, n_calls, n_work) if n_calls else np.full(n_work, -1)
    items = {"ts_ns": ts, "end_ns": ts + dur, "launch": launch}
    work = GpuWork(pd.DataFrame(items))
    n = int(rng.integers(0, 12))
    start = rng.integers(-20, span + 60, n)
    end = start + rng.integers(-10, span // 2 + 2, n)
    ctx = SimpleNamespace(rt_ts=rt_ts, rt_end=rt_end, is_launch=is_launch)
    return work, start, end, ctx


@pytest.mark.parametrize("block", [1, 3, 1 << 14])
def test_idle_splits_are_the_per_window_gaps(block: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """``_idle_splits`` (the union's own gaps split once, windows' sums as differences of running sums, any block)
    gives the same four integer columns as enumerating every window's gaps did."""
    monkeypatch.setattr(bd_mod, "_GAP_BLOCK", block)
    rng = np.random.default_rng(28)
    for _ in range(600):
        work, start, end, ctx = _random_case(rng)
        want = _old_idle_splits(work, start, end, ctx)
        *got, union_ns = _idle_splits(work, start, end, ctx)
        assert union_ns == iv.total(work.ts, work.end)
        for g, w in zip(got, want, strict=True):
            assert g.dtype == np.int64
            np.testing.assert_array_equal(g, w)


def test_union_first_opens_each_piece() -> None:
    """``union_first``: the same union as ``union``; each piece's row is the first non-empty interval (by start,
    then row) at its start, and for sorted inputs without empty intervals the first row at or after that start."""
    rng = np.random.default_rng(5)
    for trial in range(400):
        n = int(rng.integers(0, 120))
        s = rng.integers(0, 400, n)
        e = s + rng.integers(-3 if trial % 3 == 0 else 1, 30, n)
        if trial % 2:
            order = np.argsort(s, kind="stable")
            s, e = s[order], e[order]
        us, ue, opens = iv.union_first(s, e)
        want = iv.union(s, e)
        np.testing.assert_array_equal(us, want[0])
        np.testing.assert_array_equal(ue, want[1])
        assert opens.dtype == np.int64 and opens.size == us.size
        for p, r in enumerate(opens.tolist()):
            ok = np.flatnonzero((s == us[p]) & (e > s))
            assert r == ok[0]
        if trial % 2 and (e > s).all():
            np.testing.assert_array_equal(opens, np.searchsorted(s, us, side="left"))


def test_group_sums_are_the_groupby_sums() -> None:
    """``group_sums`` is ``pd.Series(values).groupby(codes).sum()`` to the last bit (pandas' compensated sum, rows
    in order), 0.0 for groups without rows, rows of code -1 in none; also with no rows or no groups."""
    rng = np.random.default_rng(3)
    plain_differs = 0
    for trial in range(300):
        size = int(rng.integers(0, 3000))
        n = int(rng.integers(0, 40))
        codes = rng.integers(-1 if trial % 2 else 0, max(n, 1), size) if n else np.full(size, -1)
        codes = codes.astype((np.int8, np.int16, np.int64)[trial % 3])
        values = rng.random(size) * 10.0 ** int(rng.integers(0, 12))
        if trial % 4 == 0:
            values[rng.random(size) < 0.5] *= 1e-9  # magnitudes far apart: where a compensated sum differs
        want = pd.Series(values).groupby(codes).sum()
        want = want[want.index >= 0].reindex(range(n), fill_value=0.0).to_numpy()
        got = group_sums(values, codes, n)
        assert got.dtype == np.float64 and got.shape == (n,)
        np.testing.assert_array_equal(got, want)
        ok = codes >= 0
        plain_differs += not np.array_equal(got, np.bincount(codes[ok], weights=values[ok], minlength=n))
    assert plain_differs  # the cases tell pandas' sums from plain ones (np.bincount's)


def test_rows_in_steps_is_isin() -> None:
    """``rows_in_steps`` is ``isin`` of the step numbers: steps -1 (none) and beyond the wanted ones, no wanted
    step, no rows, and numbers below -1."""
    rng = np.random.default_rng(9)
    for trial in range(300):
        size = int(rng.integers(0, 500))
        n = int(rng.integers(1, 30))
        step = rng.integers(-3 if trial % 7 == 0 else -1, n, size)
        wanted = set(rng.integers(0, n + 5, int(rng.integers(0, n + 1))).tolist())
        got = rows_in_steps(step, wanted)
        assert got.dtype == bool
        np.testing.assert_array_equal(got, pd.Series(step).isin(wanted).to_numpy())


def _old_assign_to_steps(times_ns: np.ndarray, steps: tuple) -> np.ndarray:
    """``steps.assign_to_steps`` before it worked in place (verbatim)."""
    if not steps:
        return np.full(len(times_ns), -1, dtype=np.int64)
    starts = np.array([s.host_start_ns for s in steps], dtype=np.int64)
    ends = np.array([s.host_end_ns for s in steps], dtype=np.int64)
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], ends[order]
    t = np.asarray(times_ns, dtype=np.int64)
    pos = np.searchsorted(starts, t, side="right") - 1
    ok = (pos >= 0) & (t < ends[np.maximum(pos, 0)])
    return np.where(ok, order[np.maximum(pos, 0)], -1)


def test_assign_to_steps_in_place_is_the_old() -> None:
    """``assign_to_steps``: the same step per time as before, with steps in and out of start order, empty or
    inverted windows, equal starts, times before, between and after them, and no steps."""
    from phaseprof.analysis.steps import StepPhase, StepWindow, assign_to_steps

    rng = np.random.default_rng(17)
    for trial in range(1500):
        k = int(rng.integers(0, 8))
        st = rng.integers(0, 1000, k)
        en = st + rng.integers(-5, 300, k)
        steps = tuple(StepWindow(i, int(a), int(b), StepPhase.UNKNOWN, "x") for i, (a, b) in enumerate(zip(st, en)))
        if trial % 3 == 0:
            steps = tuple(sorted(steps, key=lambda s: s.host_start_ns))
        t = rng.integers(-100, 1400, int(rng.integers(0, 300)))
        got, want = assign_to_steps(t, steps), _old_assign_to_steps(t, steps)
        assert got.dtype == want.dtype == np.int64
        np.testing.assert_array_equal(got, want)


def test_launches_without_missing_ids_is_the_lookup() -> None:
    """``correlate._launches`` where every call and every GPU row has an id (its paths without compressing them),
    ids sorted or not, repeated or not, dense (a table) or sparse (a search), and ids no call has: the first runtime
    row with each id, as the pandas lookup it replaced."""
    from phaseprof.trace.correlate import _launches

    def reference(corr: np.ndarray, g_corr: np.ndarray) -> np.ndarray:
        valid = corr >= 0
        lookup = pd.Series(np.flatnonzero(valid), index=corr[valid])
        lookup = lookup[~lookup.index.duplicated(keep="first")]
        out = lookup.reindex(g_corr).fillna(-1).to_numpy(dtype=np.int64).copy()
        out[g_corr < 0] = -1
        return out

    rng = np.random.default_rng(21)
    for trial in range(400):
        top = (60, 10 ** 9)[trial % 2]
        n = int(rng.integers(1, min(200, top)))
        corr = np.sort(rng.choice(top, n, replace=False)) if trial % 3 else rng.integers(0, top, n)
        g_corr = np.r_[rng.choice(corr, int(rng.integers(0, 100))), rng.integers(0, top + 5, int(trial % 4))]
        if trial % 5 == 0:
            g_corr = np.r_[g_corr, -1]  # one GPU row without an id
        got = _launches(corr, g_corr.astype(np.int64))
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, reference(corr, g_corr.astype(np.int64)))


def test_search_ascending_is_searchsorted() -> None:
    """``intervals._search_ascending`` (a merge) is ``np.searchsorted(..., side="right")`` for ascending queries:
    ties with the array and among the queries, queries before, inside and past it, an empty array; and
    ``Merged.overlap(in_order=True)`` is ``overlap``."""
    from phaseprof.analysis.intervals import _search_ascending

    rng = np.random.default_rng(12)
    for trial in range(500):
        a = np.sort(rng.integers(0, 300, int(rng.integers(0, 80))))
        t = np.sort(rng.integers(-20, 340, int(rng.integers(1, 80))))
        if trial % 4 == 0 and a.size:
            t = np.sort(np.r_[t, rng.choice(a, 10)])  # equal to values of the array
        got = _search_ascending(a, t)
        np.testing.assert_array_equal(got, np.searchsorted(a, t, side="right"))
        s, e = rng.integers(0, 300, 40), rng.integers(0, 300, 40)
        m = iv.Merged(*iv.union(s, e + 5))
        qs = np.sort(rng.integers(-10, 320, 30))
        qe = qs + rng.integers(0, 3, 30)
        qe = np.maximum.accumulate(qe)
        np.testing.assert_array_equal(m.overlap(qs, qe, in_order=True), m.overlap(qs, qe))


def test_per_step_views_with_sparse_steps_and_uneven_buckets() -> None:
    """``_per_step_views`` (one step part for both columns, a dense key where it fits, else a groupby of it) is the
    groupby of the (step, bucket) pair: step numbers far apart (the groupby path), columns with different bucket
    counts, null buckets, items of no step, no items."""
    from phaseprof.analysis.breakdown import _per_step_views

    def reference(items: pd.DataFrame) -> dict:
        out = {}
        for col in ("kernel_bucket", "module_bucket"):
            per: dict = {}
            if len(items):
                for (k, b), v in items.groupby(["step", col], observed=True)["share_ns"].sum().items():
                    per.setdefault(int(k), {})[str(b)] = float(v) * 1e-3
            out[col] = per
        return out

    rng = np.random.default_rng(8)
    for trial in range(60):
        size = int(rng.integers(0, 400))
        top = (5, 10 ** 6)[trial % 2]  # dense steps, or steps whose keys outnumber the items by far
        step = np.sort(rng.integers(-1, top, size))
        kb = pd.Categorical.from_codes(rng.integers(-1 if trial % 3 == 0 else 0, 7, size),
                                       categories=[f"k{i}" for i in range(7)])
        mb = pd.Categorical.from_codes(rng.integers(-1, 3, size), categories=["m0", "m1", "m2"])
        items = pd.DataFrame({"step": step, "kernel_bucket": kb, "module_bucket": mb,
                              "share_ns": rng.random(size) * 10.0 ** int(rng.integers(0, 9))})
        got, want = _per_step_views(items), reference(items)
        assert got == want
        for col in ("kernel_bucket", "module_bucket"):
            assert list(got[col]) == list(want[col])
            assert [list(v) for v in got[col].values()] == [list(v) for v in want[col].values()]


@pytest.mark.parametrize("block", [1, 2, 5])
def test_search_sorted_in_blocks_is_searchsorted(block: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """``correlate._search_sorted`` is ``np.searchsorted`` on either side: ascending queries in blocks (ties with
    the array and among themselves, before, inside and past it, a last short block), others as they are."""
    from phaseprof.trace import correlate as corr_mod

    monkeypatch.setattr(corr_mod, "_SEARCH_BLOCK", block)
    rng = np.random.default_rng(4)
    for trial in range(400):
        a = np.sort(rng.integers(0, 200, int(rng.integers(0, 60))))
        q = rng.integers(-10, 220, int(rng.integers(0, 50)))
        if trial % 3:
            q = np.sort(np.r_[q, rng.choice(a, 5)] if a.size else q)
        for side in ("left", "right"):
            got = corr_mod._search_sorted(a, q, side)
            np.testing.assert_array_equal(got, np.searchsorted(a, q, side=side))
