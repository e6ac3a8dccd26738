"""Interval maths against a brute-force, one-nanosecond-at-a-time reference."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from phaseprof.analysis import intervals as iv

spans = st.lists(st.tuples(st.integers(0, 60), st.integers(0, 25)), max_size=12).map(
    lambda xs: (np.array([a for a, _ in xs], dtype=np.int64), np.array([a + d for a, d in xs], dtype=np.int64)))


def covered_set(s, e):
    return {t for a, b in zip(s, e) for t in range(a, b)}


@given(spans)
def test_union_total_matches_bruteforce(x):
    s, e = x
    assert iv.total(s, e) == len(covered_set(s, e))
    us, ue = iv.union(s, e)
    assert np.all(us[1:] > ue[:-1])  # disjoint and not touching
    assert covered_set(us, ue) == covered_set(s, e)


@given(spans, st.integers(0, 40), st.integers(0, 60))
def test_gaps_are_the_complement(x, lo, length):
    s, e = x
    hi = lo + length
    gs, ge = iv.gaps(s, e, lo, hi)
    assert covered_set(gs, ge) == set(range(lo, hi)) - covered_set(s, e)


@given(spans, spans)
def test_overlap_with_union(q, x):
    (qs, qe), (s, e) = q, x
    got = iv.overlap_with_union(qs, qe, s, e)
    cov = covered_set(s, e)
    want = [len(set(range(a, b)) & cov) for a, b in zip(qs, qe)]
    assert got.tolist() == want


@settings(max_examples=200)
@given(spans)
def test_exclusive_shares_sum_to_union_and_split_fairly(x):
    s, e = x
    shares = iv.exclusive_shares(s, e)
    assert abs(shares.sum() - iv.total(s, e)) < 1e-6
    for i, (a, b) in enumerate(zip(s, e)):  # each share = sum over its ns of 1/active
        want = sum(1.0 / sum(1 for c, d in zip(s, e) if c <= t < d) for t in range(a, b))
        assert abs(shares[i] - want) < 1e-6


def test_nested_interval_keeps_outer_time():
    # torch's helper dropped time when one interval contained another; ours must not.
    s, e = np.array([0, 10]), np.array([100, 20])
    assert iv.total(s, e) == 100
    assert iv.exclusive_shares(s, e).tolist() == [95.0, 5.0]


def test_exclusive_shares_as_the_add_at_formulation():
    """The bincount/stable-sort version gives the same floats as the np.unique + np.add.at one it replaced."""
    import numpy as np

    from phaseprof.analysis.intervals import exclusive_shares

    def reference(s, e):
        s, e = np.asarray(s, dtype=np.int64), np.asarray(e, dtype=np.int64)
        if s.size == 0:
            return np.zeros(0)
        e = np.maximum(e, s)
        bounds = np.unique(np.r_[s, e])
        delta = np.zeros(bounds.size, dtype=np.int64)
        np.add.at(delta, np.searchsorted(bounds, s), 1)
        np.add.at(delta, np.searchsorted(bounds, e), -1)
        active = np.cumsum(delta)[:-1]
        seg_len = np.diff(bounds).astype(np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            per = np.where(active > 0, seg_len / np.maximum(active, 1), 0.0)
        prefix = np.r_[0.0, np.cumsum(per)]
        return prefix[np.searchsorted(bounds, e)] - prefix[np.searchsorted(bounds, s)]

    rng = np.random.default_rng(3)
    for _ in range(300):
        n = int(rng.integers(0, 150))
        s = rng.integers(0, 500, n)
        e = s + rng.integers(-5, 80, n)
        got, want = exclusive_shares(s, e), reference(s, e)
        assert got.dtype == want.dtype and np.array_equal(got, want)
