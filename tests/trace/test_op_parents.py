"""``trace.correlate._op_parents`` gives exactly what the plain stack sweep it replaced gives, both ways it has:
the native scanner library's one pass (``pp_op_parents``) and the array path + sweep of the stretches with partial
overlaps (where the library is not built): on every committed trace, the public ones, and hand-made jitter
cases. Every test runs once per way (the ``sweep`` fixture)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from phaseprof.analysis.items import op_modules
from phaseprof.classify.rules import load_rules
from phaseprof.trace import native
from phaseprof.trace.correlate import _innermost_ops, _op_parents
from phaseprof.trace.read import load_tables

from ..native_build import scanner_or_skip

ROOT = Path(__file__).resolve().parents[2]
PUBLIC = ROOT.parent / "shared" / "traces" / "public"
TRACES = sorted(ROOT.glob("traces/**/*.json.gz")) + sorted(PUBLIC.glob("*.json.gz"))


@pytest.fixture(autouse=True, params=["native", "array"])
def sweep(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    """``native``: the library's pass (the calls it answered counted: it declines float times); ``array``: the
    library's pass switched off, so the array path runs."""
    calls = {"native": 0}
    if request.param == "array":
        monkeypatch.setattr(native, "op_parents", lambda *a, **k: None)
        yield calls
        return
    scanner_or_skip()
    real = native.op_parents

    def counted(*a, **k):
        out = real(*a, **k)
        calls["native"] += out is not None
        return out
    monkeypatch.setattr(native, "op_parents", counted)
    yield calls


def thread_keys(frame: pd.DataFrame) -> np.ndarray:
    """One string per row naming its host thread ("pid/tid"), comparable across tables: how ``correlate`` keyed
    threads before ``_thread_codes`` (kept here as the definition those codes are tested against)."""
    pc, tc = frame["pid"].cat.codes.to_numpy(), frame["tid"].cat.codes.to_numpy()
    pair = pc.astype(np.int64) * (len(frame["tid"].cat.categories) + 1) + tc
    uniq, inv = np.unique(pair, return_inverse=True)
    pcat, tcat = frame["pid"].cat.categories, frame["tid"].cat.categories
    n_t = len(tcat) + 1
    names = np.asarray([f"{pcat[u // n_t]}/{tcat[u % n_t]}" for u in uniq.tolist()], dtype=object)
    return names[inv.reshape(-1)]


def reference_op_parents(ops: pd.DataFrame) -> np.ndarray:
    """The sequential sweep ``_op_parents`` was until the array path (kept verbatim as the definition)."""
    parent = [-1] * len(ops)
    if ops.empty:
        return np.asarray(parent, dtype=np.int64)
    ts_a = ops["ts_ns"].to_numpy()
    end_a = ops["end_ns"].to_numpy()
    key_codes = pd.factorize(thread_keys(ops))[0]
    order = np.lexsort((-(end_a - ts_a), ts_a, key_codes))
    ts, end, keys = ts_a.tolist(), end_a.tolist(), key_codes.tolist()
    stack: list[int] = []
    prev_key = None
    for i in order.tolist():
        key = keys[i]
        if key != prev_key:
            stack.clear()
            prev_key = key
        t = ts[i]
        while stack and end[stack[-1]] <= t:
            stack.pop()
        if stack and end[i] <= end[stack[-1]]:
            parent[i] = stack[-1]
        elif stack:  # partial overlap (clock jitter): treat as sibling of the top
            parent[i] = parent[stack[-1]]
            stack.pop()
        stack.append(i)
    return np.asarray(parent, dtype=np.int64)


def reference_innermost(runtime: pd.DataFrame, ops: pd.DataFrame, parent: np.ndarray) -> np.ndarray:
    out = np.full(len(runtime), -1, dtype=np.int64)
    if runtime.empty or ops.empty:
        return out
    ots, oend = ops["ts_ns"].to_numpy(), ops["end_ns"].to_numpy()
    okey, rkey = thread_keys(ops), thread_keys(runtime)
    rts = runtime["ts_ns"].to_numpy()
    for key, ridx in pd.Series(rkey).groupby(rkey).indices.items():
        oidx = np.flatnonzero(okey == key)
        if oidx.size == 0:
            continue
        oidx = oidx[np.argsort(ots[oidx], kind="stable")]
        pos = np.searchsorted(ots[oidx], rts[ridx], side="right") - 1
        cand = np.where(pos >= 0, oidx[np.maximum(pos, 0)], -1).tolist()
        for r, c in zip(ridx.tolist(), cand):
            while c >= 0 and oend[c] < rts[r]:
                c = parent[c]
            out[r] = c
    return out


def reference_op_modules(ops: pd.DataFrame, parent: np.ndarray, rules) -> list:
    from phaseprof.classify.classifier import module_bucket_of_op
    own = [module_bucket_of_op(str(n), rules) for n in ops["name"].astype(object)]
    out: list = [None] * len(ops)
    order = np.lexsort((-(ops["end_ns"].to_numpy() - ops["ts_ns"].to_numpy()), ops["ts_ns"].to_numpy()))
    for i in order.tolist():
        m = own[i]
        if m is None:
            p = parent[i]
            m = out[p] if p >= 0 else None
        out[i] = m
    return out


def frame(rows: list[tuple], *, dtype=np.int64) -> pd.DataFrame:
    """(ts, end[, tid[, name]]) rows -> a frame shaped like the ops table."""
    return pd.DataFrame({
        "pid": pd.Categorical(["1"] * len(rows)),
        "tid": pd.Categorical([str(r[2]) if len(r) > 2 else "1" for r in rows]),
        "ts_ns": np.array([r[0] for r in rows], dtype=dtype),
        "end_ns": np.array([r[1] for r in rows], dtype=dtype),
        "name": pd.Categorical([r[3] if len(r) > 3 else f"op{i}" for i, r in enumerate(rows)]),
    })


JITTER = {
    "nested": [(0, 100), (10, 50), (20, 30), (60, 90), (100, 200)],
    "partial": [(0, 100), (10, 50), (40, 60), (45, 55), (70, 80)],
    "partial_top_level": [(0, 100), (90, 150), (95, 120), (160, 170)],
    "partial_twice": [(0, 100), (10, 50), (40, 60), (55, 120), (58, 59), (130, 140)],
    "monotone_break": [(0, 100), (10, 40), (30, 90), (35, 36), (95, 99), (99, 105)],
    "zero_length": [(0, 0), (0, 0), (0, 10), (0, 0), (5, 5), (10, 10), (10, 20), (10, 10), (20, 20)],
    "identical": [(5, 15), (5, 15), (5, 15), (7, 9), (7, 9), (15, 15)],
    "touching": [(0, 10), (10, 20), (10, 10), (20, 30), (0, 30)],
    "threads": [(0, 100, 1), (10, 50, 2), (5, 60, 1), (55, 70, 1), (20, 30, 2), (25, 60, 2), (0, 5, 3)],
    "jitter_then_nested": [(0, 50), (10, 60), (70, 200), (80, 100), (90, 95), (150, 160)],
}


@pytest.mark.parametrize("case", sorted(JITTER))
def test_hand_made(case: str) -> None:
    rows = JITTER[case]
    for dtype in (np.int64, np.float64):
        f = frame(rows, dtype=dtype)
        np.testing.assert_array_equal(_op_parents(f), reference_op_parents(f))
    # every permutation of the rows' order in the frame
    rng = np.random.default_rng(0)
    for _ in range(20):
        f = frame([rows[i] for i in rng.permutation(len(rows))])
        np.testing.assert_array_equal(_op_parents(f), reference_op_parents(f))


def test_random_jitter() -> None:
    rng = np.random.default_rng(1)
    for trial in range(300):
        n = int(rng.integers(1, 60))
        ts = rng.integers(0, 200, n)
        dur = rng.integers(0, 80, n) * (rng.random(n) > 0.1)
        tid = rng.integers(0, 3, n)
        f = frame([(int(a), int(a + d), int(t)) for a, d, t in zip(ts, dur, tid)])
        np.testing.assert_array_equal(_op_parents(f), reference_op_parents(f), err_msg=f"trial {trial}")
        rt = frame([(int(a), int(a) + 1, int(t)) for a, t in zip(rng.integers(0, 250, 30), rng.integers(0, 4, 30))])
        p = _op_parents(f)
        np.testing.assert_array_equal(_innermost_ops(rt, f, p), reference_innermost(rt, f, p))


def test_empty() -> None:
    f = frame([])
    assert _op_parents(f).dtype == np.int64 and _op_parents(f).size == 0


@pytest.mark.parametrize("path", TRACES, ids=lambda p: str(p.relative_to(p.parents[2])))
def test_real_traces(path: Path, sweep: dict, request: pytest.FixtureRequest) -> None:
    t = load_tables(path)
    rules = load_rules()
    for fr in (t.ops, t.modules):
        if fr.empty:
            continue
        got = _op_parents(fr)
        np.testing.assert_array_equal(got, reference_op_parents(fr))
    p = _op_parents(t.ops)
    np.testing.assert_array_equal(_innermost_ops(t.runtime, t.ops, p), reference_innermost(t.runtime, t.ops, p))
    if not t.modules.empty:
        pm = _op_parents(t.modules)
        np.testing.assert_array_equal(_innermost_ops(t.runtime, t.modules, pm),
                                      reference_innermost(t.runtime, t.modules, pm))
    assert list(op_modules(t.ops, p, rules)) == reference_op_modules(t.ops, p, rules)
    if request.node.callspec.params["sweep"] == "native" and not t.ops.empty:  # int64 times: the native pass ran
        assert sweep["native"] >= 2


def _sweep_order(ts: np.ndarray, end: np.ndarray, key: np.ndarray) -> np.ndarray:
    """``_sweep_order_or_none`` as an order (None: every row in place)."""
    from phaseprof.trace.correlate import _sweep_order_or_none
    order = _sweep_order_or_none(ts, end, key)
    return np.arange(ts.size) if order is None else order


def test_sweep_order_is_lexsort() -> None:
    rng = np.random.default_rng(2)
    for _ in range(200):
        n = int(rng.integers(1, 80))
        ts = np.sort(rng.integers(0, 30, n)) if rng.random() < 0.5 else rng.integers(0, 30, n)
        end = ts + rng.integers(0, 5, n)
        key = rng.integers(0, 3 if rng.random() < 0.5 else 1, n)  # one thread: the sort by thread left out
        np.testing.assert_array_equal(_sweep_order(ts, end, key), np.lexsort((-(end - ts), ts, key)))


def test_sweep_order_or_none_is_none_where_lexsort_keeps_rows() -> None:
    """``_sweep_order_or_none``: the lexsort, or None (no order, no permuted copies in ``_op_parents``) only where
    that keeps every row in place, always so for one thread in sweep order; ties at a start, two threads."""
    from phaseprof.trace.correlate import _sweep_order_or_none
    rng = np.random.default_rng(12)
    for trial in range(400):
        n = int(rng.integers(1, 60))
        ts = np.sort(rng.integers(0, 30, n)) if trial % 4 else rng.integers(0, 30, n)
        end = ts + rng.integers(0, 5, n)
        if trial % 3 == 0:  # ties already longest first: in place
            order = np.lexsort((-(end - ts), ts))
            ts, end = ts[order], end[order]
        key = rng.integers(0, 2, n) if trial % 5 == 0 else np.zeros(n, dtype=np.int64)
        if trial % 7 == 0:
            key = np.sort(key)
        want = np.lexsort((-(end - ts), ts, key))
        got = _sweep_order_or_none(ts, end, key)
        in_place = bool((want == np.arange(n)).all())
        assert got is None or not in_place or key.max() > 0, trial
        assert got is not None or in_place, trial
        np.testing.assert_array_equal(np.arange(n) if got is None else got, want)


def test_by_thread_then_start_is_lexsort() -> None:
    """``_by_thread_then_start``: None (no sort) exactly where ``np.lexsort((ts, code))`` keeps every row in place."""
    from phaseprof.trace.correlate import _by_thread_then_start
    rng = np.random.default_rng(3)
    for trial in range(300):
        n = int(rng.integers(0, 60))
        code = np.sort(rng.integers(0, 3, n)) if trial % 3 else rng.integers(0, 3 if trial % 2 else 1, n)
        ts = rng.integers(0, 20, n)
        if trial % 2:  # in start order within each thread
            ts = np.concatenate([np.sort(ts[code == c]) for c in np.unique(code)]) if n else ts
        got, want = _by_thread_then_start(ts, code), np.lexsort((ts, code))
        np.testing.assert_array_equal(np.arange(n) if got is None else got, want)
        assert (got is None) == bool((want == np.arange(n)).all())


def test_thread_codes_are_factorized_thread_keys() -> None:
    """``_thread_codes`` numbers threads exactly as ``pd.factorize`` of the row strings did, across frames, even
    when two (pid, tid) pairs spell the same "pid/tid" string."""
    from phaseprof.trace.correlate import _thread_codes

    def frame(pids: list[str], tids: list[str]) -> pd.DataFrame:
        return pd.DataFrame({"pid": pd.Categorical(pids), "tid": pd.Categorical(tids)})

    a = frame(["1/2", "7", "1", "7", "1/2"], ["3", "9", "2/3", "8", "3"])  # "1/2/3" twice
    b = frame(["7", "5", "1"], ["8", "5", "2/3"])
    empty = frame([], [])
    for frames in ((a,), (b,), (a, b), (b, a), (empty, a), (a, empty, b)):
        want = pd.factorize(np.concatenate([thread_keys(f) for f in frames]))[0]
        got = _thread_codes(*frames)
        assert [len(g) for g in got] == [len(f) for f in frames]
        np.testing.assert_array_equal(np.concatenate(got), want)
    for path in TRACES[:4]:
        t = load_tables(path)
        for fr in (t.ops, t.runtime):
            np.testing.assert_array_equal(_thread_codes(fr)[0], pd.factorize(thread_keys(fr))[0])


def test_factorize_small_is_pd_factorize() -> None:
    """``_factorize_small`` (the thread pairs' codes without pandas' hash table) numbers exactly as
    ``pd.factorize``: pairs first seen late (past its first blocks), a missing code (-1: pandas' path), one row."""
    from phaseprof.trace.correlate import _factorize_small

    rng = np.random.default_rng(3)
    cases = []
    for _ in range(100):
        n, n_pid, n_tid = int(rng.integers(1, 30000)), int(rng.integers(1, 5)), int(rng.integers(1, 40))
        pc, tc = rng.integers(0, n_pid, n).astype(np.int8), rng.integers(0, n_tid, n).astype(np.int16)
        if rng.random() < 0.4:
            tc[:max(n - 3, 0)] = 0  # other threads appear only in the last rows
        cases.append((pc, tc, n_tid + 1))
    cases.append((np.array([0, 1, -1, 1], dtype=np.int8), np.array([2, -1, 0, 2], dtype=np.int8), 4))
    cases.append((np.array([0], dtype=np.int8), np.array([0], dtype=np.int8), 2))
    cases.append((np.full(5000, 2, dtype=np.int8), np.full(5000, 5, dtype=np.int16), 7))  # one thread: no pass
    cases.append((np.full(3, 1, dtype=np.int8), np.array([-1, -1, -1], dtype=np.int8), 4))  # a missing tid
    for pc, tc, n_t in cases:
        want_codes, want_uniq = pd.factorize(pc.astype(np.int64) * n_t + tc)
        codes, uniq = _factorize_small(pc, tc, n_t)
        np.testing.assert_array_equal(codes, want_codes)
        np.testing.assert_array_equal(uniq, want_uniq)


def test_deep_nesting() -> None:
    """More than 32 levels (the array path then searches each level instead of counting over all rows), with
    siblings, zero-length ops and a partial overlap among them, on two threads."""
    rows = [(i, 1000 - i, 1) for i in range(40)] + [(100 + 10 * i, 105 + 10 * i, 1) for i in range(20)]
    rows += [(300, 300, 1), (500, 520, 1), (510, 530, 1)] + [(i, 500 - i, 2) for i in range(35)]
    for order in (list(range(len(rows))), list(np.random.default_rng(4).permutation(len(rows)))):
        f = frame([rows[i] for i in order])
        np.testing.assert_array_equal(_op_parents(f), reference_op_parents(f))
