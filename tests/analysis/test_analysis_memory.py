"""The analysis' memory shortcuts (views instead of permuted copies, blocks of steps,
temporaries freed early) give exactly what the code they replaced gave: each is checked against that code, kept
here verbatim as the reference, on random values and on committed traces."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from phaseprof.analysis import breakdown as bd_mod
from phaseprof.analysis import intervals as iv
from phaseprof.analysis.breakdown import _Groups
from phaseprof.columns import EventKind
from phaseprof.trace.read import load_tables
from phaseprof.trace.tables import label_in, labels

ROOT = Path(__file__).resolve().parents[2]
TRACES = [
    "traces/h200/eager/20261130T094747Z-h200-qwen3.5-35b-a3b-decode-128in-32out/trace.json.gz",
    "traces/h200/hooks/eager-prefill-4096/trace.json.gz",
    "traces/public-cut/b200_vllm_gptoss120b_eager_prefill_window.json.gz",
    "traces/graph-pair/tracelens_vllm_decode_full_replay.json.gz",
]


class _OldGroups:
    """``breakdown._Groups`` before the views (one stable sort, every ``of`` a permuted copy)."""

    def __init__(self, step: np.ndarray, n: int):
        self.n = n
        order = np.argsort(step, kind="stable")
        off = np.searchsorted(step[order], np.arange(n + 1), side="left")
        self.rows = order[off[0]:off[-1]]
        self.off = off - off[0]
        self.size = np.diff(self.off)

    def of(self, values: np.ndarray) -> np.ndarray:
        return np.asarray(values)[self.rows]


def test_groups_in_order_are_the_sorted_groups() -> None:
    """Rows already by step: ``of`` is a view of one stretch, with the same values, offsets and reductions as the
    sort's permuted copy; rows out of order still take the sort."""
    rng = np.random.default_rng(11)
    for trial in range(300):
        n = int(rng.integers(0, 12))
        size = int(rng.integers(0, 400))
        step = rng.integers(-1, n + 2, size)  # -1 and steps past n are in no group
        if trial % 2:
            step.sort()
        values = rng.integers(-50, 50, size)
        floats = rng.random(size) * 1e6
        got, want = _Groups(step, n), _OldGroups(step, n)
        np.testing.assert_array_equal(got.off, want.off)
        np.testing.assert_array_equal(got.size, want.size)
        np.testing.assert_array_equal(got.of(values), want.of(values))
        np.testing.assert_array_equal(got.sum(got.of(values)), _sum(want, want.of(values)))
        f_got = got.float_sum(got.of(floats))
        f_want = np.zeros(n)
        for k in range(n):
            f_want[k] = want.of(floats)[want.off[k]:want.off[k + 1]].sum() if want.size[k] > 1 else \
                (want.of(floats)[want.off[k]] if want.size[k] else 0.0)
        np.testing.assert_array_equal(f_got, f_want)  # bit for bit
        if trial % 2 and size:
            assert isinstance(got.rows, slice)


def _sum(g: _OldGroups, values: np.ndarray) -> np.ndarray:
    out = np.zeros(g.n, dtype=values.dtype)
    for k in range(g.n):
        out[k] = values[g.off[k]:g.off[k + 1]].sum()
    return out


def _old_overlap_with_union(q_starts, q_ends, starts, ends):  # noqa: ANN001, ANN202
    """``intervals.overlap_with_union`` before :class:`intervals.Merged`."""
    us, ue = iv.union(starts, ends)
    qs = np.asarray(q_starts, dtype=np.int64)
    qe = np.asarray(q_ends, dtype=np.int64)
    if us.size == 0 or qs.size == 0:
        return np.zeros(qs.size, dtype=np.int64)
    cum = np.r_[0, np.cumsum(ue - us)]

    def covered(t):  # noqa: ANN001, ANN202
        i = np.searchsorted(us, t, side="right")
        none = i == 0
        i -= 1
        i[none] = 0
        last_s = us[i]
        out = np.clip(t, last_s, ue[i])
        out -= last_s
        del last_s
        out += cum[i]
        out[none] = 0
        return out

    out = covered(qe)
    out -= covered(qs)
    return out.astype(np.int64, copy=False)


def _old_exclusive_shares(starts, ends):  # noqa: ANN001, ANN202
    """``intervals.exclusive_shares`` before its temporaries were cut (the sort's permuted copy, int64 ranks)."""
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    n = s.size
    if n == 0:
        return np.zeros(0)
    e = np.maximum(e, s)
    both = np.r_[s, e]
    order = np.argsort(both, kind="stable")
    both = both[order]
    new = np.empty(both.size, dtype=bool)
    new[0] = True
    np.not_equal(both[1:], both[:-1], out=new[1:])
    bounds = both[new]
    del both
    rank = np.empty(order.size, dtype=np.int64)
    rank[order] = np.cumsum(new) - 1
    del order, new
    si, ei = rank[:n], rank[n:]
    delta = np.bincount(si, minlength=bounds.size) - np.bincount(ei, minlength=bounds.size)
    active = np.cumsum(delta)[:-1]
    seg_len = np.diff(bounds).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        per = np.where(active > 0, seg_len / np.maximum(active, 1), 0.0)
    prefix = np.r_[0.0, np.cumsum(per)]
    return prefix[ei] - prefix[si]


def _random_intervals(rng: np.random.Generator, n: int, span: int) -> tuple[np.ndarray, np.ndarray]:
    s = rng.integers(0, span, n)
    e = s + rng.integers(-3, span // 4 + 2, n)  # some empty or negative (dropped / clamped)
    if rng.random() < 0.5:
        s.sort()
    return s, e


def test_merged_and_exclusive_shares_are_the_old_code() -> None:
    rng = np.random.default_rng(12)
    for _ in range(400):
        s, e = _random_intervals(rng, int(rng.integers(0, 300)), int(rng.integers(5, 5000)))
        qs, qe = _random_intervals(rng, int(rng.integers(0, 200)), 6000)
        want = _old_overlap_with_union(qs, qe, s, e)
        got = iv.overlap_with_union(qs, qe, s, e)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
        merged = iv.Merged(*iv.union(s, e))
        np.testing.assert_array_equal(merged.overlap(qs, qe), want)
        np.testing.assert_array_equal(merged.overlap(qe, qe + 7), _old_overlap_with_union(qe, qe + 7, s, e))
        got_sh, want_sh = iv.exclusive_shares(s, e), _old_exclusive_shares(s, e)
        assert got_sh.dtype == want_sh.dtype
        np.testing.assert_array_equal(got_sh, want_sh)  # bit for bit


@pytest.mark.parametrize("rel", TRACES)
def test_exclusive_shares_of_trace_kernels(rel: str) -> None:
    g = load_tables(ROOT / rel).gpu
    s, e = g["ts_ns"].to_numpy(), g["end_ns"].to_numpy()
    np.testing.assert_array_equal(iv.exclusive_shares(s, e), _old_exclusive_shares(s, e))


def test_kinds_by_category_are_the_labels() -> None:
    """``label_in(kind, (EventKind.X.value,))`` is ``labels(kind) == EventKind.X``, nulls included."""
    col = pd.Series(pd.Categorical(["kernel", None, "memcpy", "memset", "kernel", "", None],
                                   categories=["kernel", "memcpy", "memset", ""]))
    for k in (EventKind.KERNEL, EventKind.MEMCPY, EventKind.MEMSET):
        np.testing.assert_array_equal(label_in(col, (k.value,)), labels(col) == k)
    obj = pd.Series(["kernel", "memcpy", None], dtype=object)
    np.testing.assert_array_equal(label_in(obj, (EventKind.MEMCPY.value,)), labels(obj) == EventKind.MEMCPY)


def test_all_true_filter_is_the_frame() -> None:
    """``gpu_items`` skips ``items[step >= 0]`` where every item is in a step: pandas gives the same frame then
    (a RangeIndex, the same columns and values)."""
    f = pd.DataFrame({"a": np.arange(5), "b": np.linspace(0, 1, 5), "c": pd.Categorical(list("xyzxy"))})
    pd.testing.assert_frame_equal(f[np.ones(5, dtype=bool)], f, check_index_type=True, check_exact=True)
    assert isinstance(f[np.ones(5, dtype=bool)].index, pd.RangeIndex)


@pytest.mark.parametrize("rel", TRACES)
def test_idle_splits_in_blocks_are_all_at_once(rel: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole breakdown is the same whatever the block of gap candidates (one step at a time, a few, all)."""
    from phaseprof.analysis.pipeline import analyze
    from phaseprof.report.json_io import dumps

    t = load_tables(ROOT / rel)
    outs = set()
    for block in (1, 7, 1 << 40):
        monkeypatch.setattr(bd_mod, "_GAP_BLOCK", block)
        outs.add(dumps(analyze(t).breakdown))
    assert len(outs) == 1
    assert json.loads(outs.pop())["steps"]


def test_union_of_own_copies_is_union() -> None:
    """``union(..., own=True)`` may overwrite its inputs (the running end in place): the same union."""
    rng = np.random.default_rng(13)
    for _ in range(300):
        s, e = _random_intervals(rng, int(rng.integers(0, 300)), int(rng.integers(5, 5000)))
        want = iv.union(s, e)
        got = iv.union(s.copy(), e.copy(), own=True)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype
            np.testing.assert_array_equal(g, w)
    ro = np.arange(5)
    ro.flags.writeable = False
    np.testing.assert_array_equal(iv.union(ro, ro + 2, own=True)[1], [6])  # read-only inputs: not overwritten


@pytest.mark.parametrize("rel", TRACES)
def test_marker_rows_by_category_are_isin(rel: str) -> None:
    """``steps._from_markers`` picks its rows with ``label_in`` (per category): ``isin`` of the same names."""
    from phaseprof.trace.markers import parse_step_marker

    ops = load_tables(ROOT / rel).ops
    names = [n for n in ops["name"].cat.categories if parse_step_marker(n) is not None] or list(
        ops["name"].cat.categories[:3])
    np.testing.assert_array_equal(label_in(ops["name"], set(names)), ops["name"].isin(names).to_numpy())


@pytest.mark.parametrize("rel", TRACES[:2])
def test_gpu_items_share_the_tables_columns_read_only(rel: str) -> None:
    """``gpu_items`` takes the tables' columns (and the launches) as they are, read-only: no copies, and a write
    through the items fails instead of changing the tables."""
    from phaseprof.analysis.pipeline import analyze

    a = analyze(ROOT / rel)
    items, g = a.prepared.items, a.tables.gpu
    if len(items) != len(g):
        pytest.skip("items outside steps: a filtered copy")
    for col in ("ts_ns", "end_ns", "bytes", "stream"):
        assert np.shares_memory(items[col].to_numpy(), g[col].to_numpy())
    assert not items["launch"].to_numpy().flags.writeable
    np.testing.assert_array_equal(items["launch"].to_numpy(), a.prepared.correlated.gpu_launch)
    before = g["ts_ns"].to_numpy().copy()
    with pytest.raises(ValueError):
        items.loc[0, "ts_ns"] = -5
    np.testing.assert_array_equal(g["ts_ns"].to_numpy(), before)


def _old_bucket_times(items: pd.DataFrame, col: str, busy_ns: float) -> list:
    """``breakdown._bucket_times`` before its codes path (a pandas groupby of the column, sorted by its sums)."""
    from phaseprof.analysis.results import BucketTime

    if items.empty:
        return []
    g = items.groupby(col, observed=True)["share_ns"].agg(["sum", "size"]).sort_values("sum", ascending=False)
    return [BucketTime(str(b), float(r["sum"]) * 1e-3, 100.0 * float(r["sum"]) / busy_ns if busy_ns else 0.0,
                       int(r["size"])) for b, r in g.iterrows()]


def _phase_frames() -> list[pd.DataFrame]:
    """Every phase's items of a few committed traces (as ``summarize`` passes them), and odd frames: null names,
    null buckets and modules, ties in time, no rows."""
    from phaseprof.analysis.pipeline import analyze

    frames = []
    for rel in TRACES[:3]:
        a = analyze(ROOT / rel)
        items = a.prepared.items
        for ph in {r.phase for r in a.breakdown.steps}:
            idx = {r.index for r in a.breakdown.steps if r.phase == ph}
            frames.append(items.loc[items["step"].isin(idx).to_numpy(), bd_mod._PHASE_SUMMARY_COLUMNS])
    rng = np.random.default_rng(14)
    base = frames[0]
    for trial in range(6):
        f = base.copy()
        n = len(f)
        if trial % 2 == 0:
            f["share_ns"] = np.round(rng.random(n) * 4) * 1000.0  # many equal times: the sort's ties
        for col, p in (("name", 0.05), ("kernel_bucket", 0.05 * (trial % 3)), ("module_bucket", 0.1)):
            vals = f[col].array.copy()
            vals[rng.random(n) < p] = np.nan
            f[col] = vals
        frames.append(f)
    frames.append(base.iloc[:0])
    return frames


def test_top_kernels_and_bucket_times_are_the_per_bucket_frames() -> None:
    """``_top_kernels`` (one pass) is ``_kernel_stats`` of each bucket's frame, and ``_bucket_times`` from codes
    is the groupby it replaced: every field, every float to the last bit, the same order."""
    for f in _phase_frames():
        busy = float(f["share_ns"].sum())
        want = {str(b): bd_mod._kernel_stats(sub, busy, 5) for b, sub in f.groupby("kernel_bucket", observed=True)}
        got = bd_mod._top_kernels(f, busy, 5)
        assert list(got) == list(want)
        assert got == want
        want_all = {str(b): bd_mod._kernel_stats(sub, busy, None) for b, sub in
                    f.groupby("kernel_bucket", observed=True)}
        assert bd_mod._top_kernels(f, busy, None) == want_all
        for col in ("kernel_bucket", "module_bucket"):
            assert bd_mod._bucket_times(f, col, busy) == _old_bucket_times(f, col, busy)
            assert bd_mod._bucket_times(f, col, 0.0) == _old_bucket_times(f, col, 0.0)


@pytest.mark.parametrize("rel", [TRACES[0], "traces/cpu/vllm-own-stack/tiny-hybrid-eager-prefill64-decode1.pt.trace.json.gz"])
def test_prepared_links_and_kernel_view_made_again_are_the_same(rel: str) -> None:
    """``Prepared.correlated`` and ``.kernel_buckets``, no longer kept through the analysis, are what ``prepare``
    had: ``correlate`` of the tables, the kernel view of every gpu row (GPU and CPU-only traces)."""
    from phaseprof.analysis.items import kernel_view_codes
    from phaseprof.analysis.pipeline import analyze
    from phaseprof.classify.rules import load_rules
    from phaseprof.trace.correlate import correlate

    a = analyze(ROOT / rel)
    c, want = a.prepared.correlated, correlate(load_tables(ROOT / rel))
    for f in ("gpu_launch", "runtime_op", "op_parent"):
        assert getattr(c, f).dtype == getattr(want, f).dtype
        np.testing.assert_array_equal(getattr(c, f), getattr(want, f))
    assert a.prepared.correlated is c  # made once
    kb = a.prepared.kernel_buckets
    assert kb.dtype == object and len(kb) == len(a.tables.gpu)
    if len(a.tables.gpu):
        assert list(kb) == list(kernel_view_codes(a.tables.gpu["name"], load_rules()).objects())


@pytest.mark.parametrize("rel", TRACES)
def test_compact_op_parents_are_the_int64_ones(rel: str) -> None:
    """``correlate(t, compact=True)`` (what ``prepare`` uses): the same links, ``op_parent`` as int32."""
    from phaseprof.trace.correlate import correlate

    t = load_tables(ROOT / rel)
    got, want = correlate(t, compact=True), correlate(t)
    assert got.op_parent.dtype == np.int32 and want.op_parent.dtype == np.int64
    for f in ("gpu_launch", "runtime_op", "op_parent"):
        np.testing.assert_array_equal(getattr(got, f), getattr(want, f))
    shuffled = t.ops.iloc[np.random.default_rng(15).permutation(len(t.ops))].reset_index(drop=True)
    from phaseprof.trace.correlate import _op_parents
    np.testing.assert_array_equal(_op_parents(shuffled, compact=True), _op_parents(shuffled))
