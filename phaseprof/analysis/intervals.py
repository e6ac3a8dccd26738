"""Interval arithmetic on half-open ``[start, end)`` integer-ns intervals, vectorised with numpy.

Everything that says "busy", "idle" or "overlap" in phaseprof is computed here, so these few functions are
tested against a brute-force reference (tests/analysis/test_intervals.py). Unlike torch's helper, an interval
contained in another never loses or double-counts time.
"""

from __future__ import annotations

import numpy as np

Array = np.ndarray


def union(starts: Array, ends: Array, *, own: bool = False) -> tuple[Array, Array]:
    """Merge intervals into sorted, disjoint ones. Empty/negative-length intervals are dropped. ``own``: the
    caller's own int64 copies, which may be overwritten (one temporary column fewer)."""
    us, ue, _ = _union(starts, ends, own=own, first=False)
    return us, ue


def union_first(starts: Array, ends: Array) -> tuple[Array, Array, Array]:
    """:func:`union`, and per merged interval the row of the input interval that opens it (the first non-empty
    one by start; equal starts: the first row). For inputs sorted by start with no empty interval, that row is
    the first row starting at or after the merged interval's start (what a search for it would find)."""
    return _union(starts, ends, own=False, first=True)


def _union(starts: Array, ends: Array, *, own: bool, first: bool) -> tuple[Array, Array, Array | None]:
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    own = own and s.dtype == np.int64 and e.dtype == np.int64 and s.flags.writeable and e.flags.writeable
    keep = e > s
    rows = None  # input row of each row below, where not the same (rows dropped or sorted): only for ``first``
    if not keep.all():
        s, e = s[keep], e[keep]
        if first:
            rows = np.flatnonzero(keep)
    del keep
    if s.size == 0:
        return s, e, np.zeros(0, dtype=np.int64) if first else None
    # Memory and time: the inputs are mostly in start order already (kernels, calls); then neither
    # the sort nor its two permuted copies are needed.
    if not (s[1:] >= s[:-1]).all():
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
        if first:
            rows = order if rows is None else rows[order]
        del order
    run_end = np.maximum.accumulate(e, out=e if own else None)
    # A new merged interval starts where the start is beyond everything seen so far.
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    np.greater(s[1:], run_end[:-1], out=new[1:])
    idx = np.flatnonzero(new)
    del new
    out_s = s[idx]
    # each piece ends at the running end of the row before the next piece's first (a gather from idx's own
    # values shifted in place: no copy of it for ``first``)
    out_e = np.empty_like(out_s)
    idx -= 1
    np.take(run_end, idx[1:], out=out_e[:-1], mode="clip")  # "clip": valid rows, and no buffer for ``out``
    out_e[-1] = run_end[-1]
    del run_end
    if not first:
        return out_s, out_e, None
    idx += 1
    return out_s, out_e, idx if rows is None else rows[idx]


def total(starts: Array, ends: Array) -> int:
    """Length of the union of the intervals (ns)."""
    s, e = union(starts, ends)
    return int((e - s).sum())


def clip(starts: Array, ends: Array, lo: int, hi: int) -> tuple[Array, Array]:
    """Clip intervals to ``[lo, hi)``, dropping those that fall outside."""
    s = np.clip(np.asarray(starts, dtype=np.int64), lo, hi)
    e = np.clip(np.asarray(ends, dtype=np.int64), lo, hi)
    keep = e > s
    return s[keep], e[keep]


def gaps(starts: Array, ends: Array, lo: int, hi: int) -> tuple[Array, Array]:
    """The complement of the union of the intervals within ``[lo, hi)``: the idle gaps."""
    s, e = union(*clip(starts, ends, lo, hi))
    gs = np.r_[lo, e]
    ge = np.r_[s, hi]
    keep = ge > gs
    return gs[keep], ge[keep]


def overlap_with_union(q_starts: Array, q_ends: Array, starts: Array, ends: Array) -> Array:
    """For each query interval, how many ns of it are covered by the union of ``[starts, ends)``."""
    return Merged(*union(starts, ends)).overlap(q_starts, q_ends)


class Merged:
    """A union of intervals as :func:`union` returns it (sorted, disjoint), measured against many batches of
    queries (:meth:`overlap`) without merging it again for each batch."""

    def __init__(self, us: Array, ue: Array):
        self.us, self.ue = us, ue
        # covered(t) = total union length in (-inf, t]; overlap = covered(qe) - covered(qs).
        self.cum = np.r_[0, np.cumsum(ue - us)] if us.size else np.zeros(1, dtype=np.int64)

    def overlap(self, q_starts: Array, q_ends: Array, *, in_order: bool = False) -> Array:
        """:func:`overlap_with_union` of the queries with this union. ``in_order``: the starts ascend, and so do
        the ends (gaps of one union, say)."""
        qs = np.asarray(q_starts, dtype=np.int64)
        qe = np.asarray(q_ends, dtype=np.int64)
        if self.us.size == 0 or qs.size == 0:
            return np.zeros(qs.size, dtype=np.int64)
        out = self._covered(qe, in_order)
        out -= self._covered(qs, in_order)
        return out.astype(np.int64, copy=False)

    def _covered(self, t: Array, in_order: bool = False) -> Array:
        us, ue, cum = self.us, self.ue, self.cum
        i = _search_ascending(us, t) if in_order else np.searchsorted(us, t, side="right")  # starting at or before t
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


def _search_ascending(a: Array, t: Array) -> Array:
    """``np.searchsorted(a, t, side="right")`` for ascending ``t``: the part of ``a`` that ``t`` spans merged with
    ``t`` by a stable sort of the two (two sorted runs: one linear merge), each query's place in it less the
    queries before it. A binary search per query costs more: its ~20 unpredictable branches."""
    lo, hi = np.searchsorted(a, t[[0, -1]], side="right")
    part = a[lo:hi]
    both = np.concatenate((part, t))  # equal values: the part's first, as side="right" counts them
    order = np.argsort(both, kind="stable")
    del both
    at = np.flatnonzero(order >= part.size)  # the queries' places, in query order (a stable sort keeps it)
    del order
    at -= np.arange(t.size)
    at += lo
    return at


def exclusive_shares(starts: Array, ends: Array) -> Array:
    """Split busy time among overlapping intervals so the shares sum to the union exactly.

    Each elementary segment between consecutive boundaries is divided equally among the intervals active in
    it. Returns each interval's share in ns (float). Used so that bucket times add up to GPU busy time when
    kernels on different streams overlap.
    """
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    n = s.size
    if n == 0:
        return np.zeros(0)
    e = np.maximum(e, s)
    # np.unique with its inverse, by a stable argsort (timsort: kernels come about in time order) and a diff: each
    # start's and end's boundary number is its rank, read off the sort (two searches of the boundaries were half
    # of this function at 1M kernels)
    # Memory (this was the analysis' peak at 117 MB): the boundaries sorted in place (the same values as
    # permuted by the sort's order, without a third copy), ranks as int32 where they fit, each temporary deleted
    # as soon as it is used.
    both = np.r_[s, e]
    del e
    order = np.argsort(both, kind="stable")
    both.sort(kind="stable")
    new = np.empty(both.size, dtype=bool)
    new[0] = True
    np.not_equal(both[1:], both[:-1], out=new[1:])
    bounds = both[new]
    del both
    rank_t = np.int32 if order.size < 1 << 31 else np.int64
    rank = np.empty(order.size, dtype=rank_t)
    at = np.cumsum(new, dtype=rank_t)
    del new
    at -= 1
    rank[order] = at
    del order, at
    # number of intervals active in each elementary segment [bounds[k], bounds[k+1])
    si, ei = rank[:n], rank[n:]
    active = np.bincount(si, minlength=bounds.size)
    active -= np.bincount(ei, minlength=bounds.size)
    np.cumsum(active, out=active)
    active = active[:-1]
    # each segment's length split among its active intervals, 0 where none, all in one float column (the
    # same divisions, without a temporary for the lengths as integers, the clamped counts, the quotients and where's
    # result, nor a copy of the running sum)
    per = np.empty(active.size, dtype=np.float64)
    np.subtract(bounds[1:], bounds[:-1], out=per)  # integer differences, each cast as astype(float64) does
    del bounds
    none = active <= 0
    np.maximum(active, 1, out=active)
    np.divide(per, active, out=per)
    per[none] = 0.0
    del active, none
    prefix = np.empty(per.size + 1, dtype=np.float64)
    prefix[0] = 0.0
    np.cumsum(per, out=prefix[1:])
    del per
    out = prefix[ei]
    out -= prefix[si]
    return out


def intersect(a_starts: Array, a_ends: Array, b_starts: Array, b_ends: Array) -> tuple[Array, Array]:
    """Intersection of two interval sets as sorted disjoint intervals (inputs need not be unions)."""
    as_, ae = union(a_starts, a_ends)
    bs, be = union(b_starts, b_ends)
    if as_.size == 0 or bs.size == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    lo = np.searchsorted(be, as_, side="right")  # first b ending after a starts
    hi = np.searchsorted(bs, ae, side="left")  # b starting before a ends
    n = np.maximum(hi - lo, 0)
    ai = np.repeat(np.arange(as_.size), n)
    bi = np.repeat(lo, n) + (np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n))
    s = np.maximum(as_[ai], bs[bi])
    e = np.minimum(ae[ai], be[bi])
    keep = e > s
    return s[keep], e[keep]
