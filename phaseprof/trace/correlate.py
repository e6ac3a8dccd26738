"""Link every GPU activity to the host call that launched it, and every host call to its enclosing CPU ops.

- GPU activity -> runtime/driver call: by correlation id. Under CUDA-graph replay many kernels share the
  correlation id of one ``cudaGraphLaunch`` (flows are not 1:1), which this join handles naturally.
- Host call -> innermost enclosing CPU op / annotation on the same thread: by time containment, using each
  op's parent computed once from nesting. ``op_parent`` lets callers walk the stack (e.g. to find
  ``vllm::moe_forward_shared`` above an ``aten::mm``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from phaseprof.trace.tables import EventTables


@dataclass(frozen=True)
class Correlated:
    """Index arrays (``-1`` = none) aligned with the tables they annotate."""

    gpu_launch: np.ndarray  # per GPU row: row in ``runtime`` that launched it
    runtime_op: np.ndarray  # per runtime row: innermost enclosing row in ``ops`` on the same thread
    op_parent: np.ndarray  # per ops row: enclosing ops row on the same thread


def _thread_codes(*frames: pd.DataFrame) -> list[np.ndarray]:
    """Per frame, per row, an int32 code of its host thread: exactly ``pd.factorize`` of all ``frames``' rows'
    "pid/tid" strings concatenated (codes in order of first appearance), split back per frame (tested against
    that definition: ``thread_keys`` in tests/trace/test_op_parents.py).

    Why not that: it builds a string object per row (8 bytes a row, plus a sort of the whole column in
    ``np.unique``) and hashes every row's string; on a 358k-op trace that peaked at ~18 MB per call. Here each
    frame's (pid, tid) code pairs are factorized as integers (first appearance, no sort), strings are built only for
    the distinct pairs, and those are factorized in turn: equal strings (a "/" inside a pid) still share a code."""
    pair_codes, names = [], []
    for frame in frames:
        pc, tc = frame["pid"].cat.codes.to_numpy(), frame["tid"].cat.codes.to_numpy()
        n_t = len(frame["tid"].cat.categories) + 1
        codes, uniq = _factorize_small(pc, tc, n_t)
        pcat, tcat = frame["pid"].cat.categories, frame["tid"].cat.categories
        pair_codes.append(codes)
        names.append([f"{pcat[u // n_t]}/{tcat[u % n_t]}" for u in uniq.tolist()])
    # The distinct pairs of each frame come in first-appearance order, frames in order: factorizing their names in
    # that order numbers the threads as factorizing every row's name would.
    by_name = pd.factorize(np.asarray([n for ns in names for n in ns], dtype=object))[0].astype(np.int32)
    out, at = [], 0
    for codes, ns in zip(pair_codes, names):
        if len(ns) == 1:  # one thread (the rule): its code for every row, read-only and without a column
            out.append(np.broadcast_to(by_name[at:at + 1], (len(codes),)))
        else:
            out.append(by_name[at:at + len(ns)][codes] if len(ns) else np.zeros(len(codes), dtype=np.int32))
        at += len(ns)
    return out


def _factorize_small(pc: np.ndarray, tc: np.ndarray, n_t: int) -> tuple[np.ndarray, np.ndarray]:
    """``pd.factorize(pc * n_t + tc)`` (codes in order of first appearance, and the distinct values), the codes as
    int32. Where the pairs are non-negative and few (threads: always), without pandas' hash table, which held
    ~48 bytes a row (12.7 MiB at once on 268k ops): a count per value says which occur, and each one's first row
    is found in leading blocks of doubling size (the threads all appear early as a rule; the blocks' sizes add up
    to at most twice the rows when one does not)."""
    n = pc.size
    if n and pc.min() == pc.max() >= 0 and tc.min() == tc.max() >= 0:  # one thread (the rule): no whole-column pass
        return (np.broadcast_to(np.zeros(1, dtype=np.int32), (n,)),  # read-only, without a column
                np.asarray([int(pc[0]) * n_t + int(tc[0])], dtype=np.int64))
    k = (int(pc.max()) + 1) * n_t if n else 0
    if n == 0 or pc.min() < 0 or tc.min() < 0 or k > 4 * n + (1 << 16) or k >= 1 << 31:
        codes, uniq = pd.factorize(pc.astype(np.int64) * n_t + tc)
        return codes.astype(np.int32), uniq
    pair = pc.astype(np.int32)
    pair *= n_t
    pair += tc
    present = np.flatnonzero(np.bincount(pair, minlength=k))
    first = np.full(k, n, dtype=np.int64)
    todo, lo, size = present.size, 0, 4096
    while todo:
        vals, at = np.unique(pair[lo:lo + size], return_index=True)
        new = first[vals] == n
        first[vals[new]] = at[new] + lo
        todo -= int(new.sum())
        lo += size
        size *= 2
    uniq = present[np.argsort(first[present], kind="stable")]
    code_of = np.zeros(k, dtype=np.int32)
    code_of[uniq] = np.arange(uniq.size, dtype=np.int32)
    return code_of[pair], uniq.astype(np.int64)


def _op_parents(ops: pd.DataFrame, key_codes: np.ndarray | None = None, *, compact: bool = False) -> np.ndarray:
    """Per row of ``ops`` (or of any frame with pid/tid categoricals and ts_ns/end_ns), the row of the innermost
    op enclosing it on the same thread, or -1.

    Defined by a stack sweep per thread in (start, longest first) order: ops that ended by this start are popped;
    an op within the top is its child; an op that starts inside the top but ends after it (a partial overlap:
    clock jitter) is taken as the top's sibling, replacing it on the stack. Where the scanner's library is built,
    its one native pass of that sweep (``native.op_parents``) gives them all: 5.1M ops in ~0.03 s against ~0.65
    s of the array path below. Without it, :func:`_sweep` runs only on the stretches of a thread that
    hold a partial overlap; everywhere else (properly nested ops) the same
    parents come from array operations: an op's depth is the number of earlier ops still open at its start, and
    its parent is the last earlier op one level up. ``key_codes``: ``_thread_codes(ops)[0]`` where the caller
    has it already. ``compact``: int32 rows where they fit (the same values in half the memory), else int64.
    """
    n = len(ops)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    ts_a = ops["ts_ns"].to_numpy()
    end_a = ops["end_ns"].to_numpy()
    if key_codes is None:
        key_codes = _thread_codes(ops)[0]
    order = _sweep_order_or_none(ts_a, end_a, key_codes)
    out_t = np.int32 if compact and n < 1 << 31 else np.int64
    from phaseprof.trace import native  # the scanner's library: its sweep, ~25x the array path
    swept = native.op_parents(ts_a, end_a, key_codes, order, out_t)
    if swept is not None:
        return swept
    if order is None:  # the rows in sweep order already (the rule: one thread, in time order): no permuted copies
        ts, end, key = ts_a, end_a, key_codes
    else:
        ts, end, key = ts_a[order], end_a[order], key_codes[order]
    del key_codes
    sorted_parent = _nested_parents(ts, end, key)
    if sorted_parent is None:  # times the array path does not handle (not integers, huge spans): sweep them all
        sorted_parent = np.full(n, -1, dtype=np.int64)
        _sweep(np.arange(n), np.r_[True, key[1:] != key[:-1]], ts.tolist(), end.tolist(), sorted_parent)
    del ts, end, key
    if order is None:  # positions are rows (-1 stays -1)
        return sorted_parent.astype(out_t, copy=False)
    mapped = order[sorted_parent]  # rows; where there is no parent (-1) the last row, overwritten next
    mapped[sorted_parent < 0] = -1
    del sorted_parent
    parent = np.empty(n, dtype=out_t)
    parent[order] = mapped
    return parent


def _sweep_order_or_none(ts: np.ndarray, end: np.ndarray, key: np.ndarray) -> np.ndarray | None:
    """``np.lexsort((-(end - ts), ts, key))`` (thread, then start, then longest first, then row), or None where that
    is every row in place (ops of one thread in sweep order already: no order, no permuted copies). Faster on
    tables already about in time order: stable sorts by start and by thread (timsort on nearly sorted data), and
    a lexsort of only the rows that share their start with another."""
    order: np.ndarray | None = None  # None: every row in place so far (made only where a row moves)
    if ts.size < 2 or (ts[1:] >= ts[:-1]).all():  # ops in time order already (the rule): no sort, no copy
        t = ts
    else:
        order = np.argsort(ts, kind="stable")
        t = ts[order]
    tie = np.zeros(len(t), dtype=bool)
    same = t[1:] == t[:-1]
    del t
    tie[1:] |= same
    tie[:-1] |= same
    if tie.any():
        sub = np.flatnonzero(tie)
        rows = sub if order is None else order[sub]
        group = np.cumsum(~np.r_[False, same], dtype=np.int64 if len(ts) >> 31 else np.int32)[sub]  # run ids
        del same
        moved = rows[np.lexsort((rows, -(end[rows] - ts[rows]), group))]
        if order is not None or not (moved == rows).all():
            order = np.arange(ts.size) if order is None else order
            order[sub] = moved
    if key.size == 0 or key.min() == key.max():  # one thread: the sort by thread keeps every row in place
        return order
    by_key = key if order is None else key[order]
    if by_key.size and 0 <= by_key.min() and by_key.max() < 1 << 15:
        by_key = by_key.astype(np.int16)  # numpy's stable sort of 16-bit keys is a radix sort: O(n)
    by_thread = np.argsort(by_key, kind="stable")
    return by_thread if order is None else order[by_thread]


def _sweep(positions: np.ndarray, restart: np.ndarray, ts: list, end: list, parent: np.ndarray) -> None:
    """The reference stack sweep over ``positions`` (ascending, in sweep order), the stack emptied where
    ``restart`` (over all positions) is set; writes ``parent`` (in positions) at ``positions``."""
    out = parent.tolist()
    restart_l = restart.tolist()
    stack: list[int] = []
    for i in positions.tolist():
        if restart_l[i]:
            stack.clear()
        t = ts[i]
        while stack and end[stack[-1]] <= t:
            stack.pop()
        if stack and end[i] <= end[stack[-1]]:
            out[i] = stack[-1]
        elif stack:  # partial overlap (clock jitter): treat as sibling of the top
            out[i] = out[stack[-1]]
            stack.pop()
        else:
            out[i] = -1
        stack.append(i)
    parent[positions] = np.asarray(out, dtype=np.int64)[positions]


def _nested_parents(ts: np.ndarray, end: np.ndarray, key: np.ndarray) -> np.ndarray | None:
    """:func:`_op_parents` on ops already in sweep order (thread ``key``, then start, then longest first), as
    positions in that order; None when the times are not int64 or too far apart for one int64 key."""
    n = len(ts)
    if ts.dtype != np.int64 or end.dtype != np.int64 or (end < ts).any():  # the tables' times are int64
        return None
    # Memory: this runs on every op (millions of rows), each temporary a whole column: positions, levels and
    # thread numbers are int32 (half an int64 column; correlate was the analysis' largest transient),
    # updated in place and deleted as soon as they are used up.
    pos_t = np.int32 if n < 1 << 31 else np.int64
    new_thread = np.empty(n, dtype=bool)
    new_thread[0] = True
    np.not_equal(key[1:], key[:-1], out=new_thread[1:])
    # thread numbers; None for one thread (the rule), whose number 0 shifts nothing below (no column of zeros)
    thread = None
    if new_thread[1:].any():
        thread = np.cumsum(new_thread, dtype=pos_t)
        thread -= 1
    lo = int(ts.min())
    span = int(end.max()) - lo + 1
    if span * ((int(thread[-1]) if thread is not None else 0) + 2) >= 1 << 62:  # thread[-1] + 1 threads
        return None
    # Times shifted per thread so one sorted array serves every thread: thread k's times lie in [k*span, (k+1)*span).
    if thread is None:
        s_end = end - lo
    else:
        s_end = thread.astype(np.int64)
        s_end *= span
        s_end -= lo
        s_end += end
    s_end.sort(kind="stable")  # timsort: nearly sorted
    # Ops open at i's start (its depth): the earlier ops of its thread, (i - first), less those ended by then:
    # all of the thread's ops ending at or before it, (ended_all - first), less the zero-length ops at that very
    # instant that come at or after i (they sort last in a start group), (zero_after). The thread's first position
    # cancels out: depth = i - ended_all + zero_after. The shifted starts and their counts are made a block of
    # rows at a time (two int64 columns fewer at once).
    depth = np.arange(n, dtype=pos_t)
    for a in range(0, n, 1 << 16):
        b = min(a + (1 << 16), n)
        if thread is None:
            s_ts = ts[a:b] - lo
        else:
            s_ts = thread[a:b].astype(np.int64)
            s_ts *= span
            s_ts -= lo
            s_ts = s_ts + ts[a:b]
        depth[a:b] -= np.searchsorted(s_end, s_ts, side="right").astype(pos_t)
    del s_end
    zero = end == ts
    if zero.any():  # only rows in a start group holding a zero-length op have zero_after > 0
        new_group = new_thread.copy()
        np.logical_or(new_group[1:], ts[1:] != ts[:-1], out=new_group[1:])
        group_starts = np.flatnonzero(new_group)
        group = np.cumsum(new_group, dtype=pos_t)
        del new_group
        group -= 1
        zero_in_group = np.bincount(group[zero], minlength=group_starts.size)
        rows = np.flatnonzero((zero_in_group > 0)[group])
        g = group[rows]
        del group
        group_end = np.r_[group_starts[1:], n]  # the end of i's start group
        depth[rows] += np.minimum(group_end[g] - rows, zero_in_group[g]).astype(pos_t)
        del group_starts, zero_in_group, rows, g, group_end
    del zero
    # Parent: the last earlier op one level up (when the ops nest properly, the top of the sweep's stack).
    cand = np.full(n, -1, dtype=pos_t)  # position of the parent
    levels = int(depth.max()) + 1
    if levels <= 32:
        _parents_by_count(depth, levels, cand)
    else:  # many: each level's rows (ascending) from one sort by level, their parents by a search
        small = depth.astype(np.int16) if depth.max() < 1 << 15 else depth
        by_level = np.argsort(small, kind="stable").astype(pos_t)  # radix sort; positions ascending within a level
        bounds = np.searchsorted(small[by_level], np.arange(levels + 1))
        del small
        for d in range(1, levels):
            up, here = by_level[bounds[d - 1]:bounds[d]], by_level[bounds[d]:bounds[d + 1]]
            found = np.searchsorted(up, here)  # ups before each; the last of them is the candidate
            has = found > 0
            cand[here[has]] = up[found[has] - 1]
        del by_level
    # The parent, np.where(depth > 0, cand, -1), is cand itself: levels from 1 up were filled, depth-0 rows kept -1.
    parent = cand
    # Where that parent is not the sweep's (a partial overlap made the stack differ), sweep the stretch again:
    # stretches start where every earlier op of the thread has ended (the sweep's stack is empty there).
    # ok = ~inner | (found & (depth[cand] == depth - 1) & (thread[cand] == thread) & (end <= end[cand])), a block
    # of rows at a time (no whole temporary column); cand is -1 where none was found (its terms read the last
    # row, then found clears them).
    ok = np.empty(n, dtype=bool)
    for a in range(0, n, 1 << 16):
        b = min(a + (1 << 16), n)
        c, d = cand[a:b], depth[a:b]
        o = depth[c]
        o += 1
        o = o == d
        o &= c >= 0
        if thread is not None:
            o &= thread[c] == thread[a:b]
        o &= end[a:b] <= end[c]
        o |= d <= 0
        ok[a:b] = o
    del depth
    if not ok.all():
        if thread is None:
            base = -lo
        else:
            base = thread.astype(np.int64)
            base *= span
            base -= lo
        s_ts, s_end = ts + base, end + base
        del base
        open_before = np.empty(n, dtype=s_end.dtype)
        open_before[0] = s_ts[0]
        np.maximum.accumulate(s_end[:-1], out=open_before[1:])
        restart = new_thread | (s_ts >= open_before)
        stretch = np.cumsum(restart) - 1
        bad = np.zeros(int(stretch[-1]) + 1, dtype=bool)
        bad[stretch[~ok]] = True
        _sweep(np.flatnonzero(bad[stretch]), restart, ts.tolist(), end.tolist(), parent)
    return parent


def _parents_by_count(depth: np.ndarray, levels: int, cand: np.ndarray) -> None:
    """Per position at depth >= 1, the last earlier position one level up, into ``cand`` (left as is where none).
    Few levels (the rule): each level's rows by one pass over the depths, and for each the number of rows one
    level up before it, a running count of them over all rows (~3x cheaper than searching; no sort by
    level), or for a level of few rows (< 1/16 of them) a search of the rows one level up."""
    up_mask = depth == 0
    up = np.flatnonzero(up_mask)
    for d in range(1, levels):
        here_mask = depth == d
        here = np.flatnonzero(here_mask)
        # a level of few rows searches the rows above instead (the same counts: a row is never its own level's up)
        found = np.searchsorted(up, here) if here.size * 16 < depth.size \
            else np.cumsum(up_mask, dtype=cand.dtype)[here]
        has = found > 0
        cand[here[has]] = up[found[has] - 1]
        up_mask, up = here_mask, here


def _by_thread_then_start(ts: np.ndarray, code: np.ndarray) -> np.ndarray | None:
    """``np.lexsort((ts, code))`` (by thread, then start; equal starts in row order), or None where the rows are in
    that order already (one thread, ops in time order: the rule), which a stable sort would keep as they are."""
    if ts.size < 2:
        return None
    same = code[1:] == code[:-1]
    in_order = ts[1:] >= ts[:-1]
    in_order &= same
    in_order |= code[1:] > code[:-1]
    return None if in_order.all() else np.lexsort((ts, code))


#: Queries searched at once by :func:`_search_sorted` (within the part of the array they span).
_SEARCH_BLOCK = 1 << 14


def _search_sorted(a: np.ndarray, q: np.ndarray, side: str) -> np.ndarray:
    """``np.searchsorted(a, q, side=side)``; for ascending ``q`` a block of queries at a time within the part of
    ``a`` they span (a search of 1.3M calls among 4.9M ops was a third faster so, its part of ``a`` in
    cache instead of a walk down the whole of it per query)."""
    if q.size < 2 * _SEARCH_BLOCK or not bool((q[1:] >= q[:-1]).all()):
        return np.searchsorted(a, q, side=side)
    out = np.empty(q.size, dtype=np.intp)
    for lo in range(0, q.size, _SEARCH_BLOCK):
        part = q[lo:lo + _SEARCH_BLOCK]
        a0, a1 = np.searchsorted(a, part[[0, -1]], side=side)  # a[:a0] all before part, a[a1:] all after
        np.add(np.searchsorted(a[a0:a1], part, side=side), a0, out=out[lo:lo + part.size])
    return out


def _innermost_ops(runtime: pd.DataFrame, ops: pd.DataFrame, parent: np.ndarray,
                   codes: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """Per row of ``runtime``, the innermost row of ``ops`` on its thread that encloses its start, or -1: the last
    op starting at or before it (ties: the last row), then up its parents while they end before the call.
    ``codes``: ``_thread_codes(ops, runtime)`` where the caller has them already."""
    out = np.full(len(runtime), -1, dtype=np.int64)
    if runtime.empty or ops.empty:
        return out
    ots, oend = ops["ts_ns"].to_numpy(), ops["end_ns"].to_numpy()
    ocode, rcode = codes if codes is not None else _thread_codes(ops, runtime)
    # ops of one thread (the rule; _thread_codes gives it as one code broadcast): by start alone, which the
    # thread-then-start check would find comparing every pair of codes too (4.9M ops at 2.1 GB)
    one_op_thread = ocode.strides == (0,) or bool(ocode.min() == ocode.max())
    if one_op_thread:  # None: the rows in that order (positions are rows); else lexsort((ts, code)) of one code
        o_order = None if bool((ots[1:] >= ots[:-1]).all()) else np.argsort(ots, kind="stable")
    else:
        o_order = _by_thread_then_start(ots, ocode)
    o_sorted_code, o_sorted_ts = (ocode, ots) if o_order is None else (ocode[o_order], ots[o_order])
    rts = runtime["ts_ns"].to_numpy()
    # calls by thread; the calls of one thread (the rule) are every row, without grouping them
    one = rcode.size and rcode.min() == rcode.max()
    groups = [(int(rcode[0]), slice(None))] if one else pd.Series(rcode).groupby(rcode).indices.items()
    for key, ridx in groups:
        if one_op_thread:  # the ops of one thread: all of them or none (no search, no int64 copy of the codes)
            lo, hi = (0, ocode.size) if key == int(ocode[0]) else (0, 0)
        else:  # the keys in the codes' own type: searching with Python ints cast every code to int64 first
            lo, hi = np.searchsorted(o_sorted_code, np.asarray([key, key + 1], dtype=o_sorted_code.dtype))
        if lo == hi:
            continue
        pos = _search_sorted(o_sorted_ts[lo:hi], rts[ridx], "right") - 1
        at = np.maximum(pos, 0)
        at += lo
        out[ridx] = np.where(pos >= 0, at if o_order is None else o_order[at], -1)
    # Up the parents, all rows at once, while the op ends before the call starts: each row's op and start carried
    # along (read back from the whole columns every round, they were half of this at 2.1 GB).
    valid = out >= 0
    todo = None if bool(valid.all()) else np.flatnonzero(valid)  # None: every row (the rule), not indexed
    del valid
    c, t = (out, rts) if todo is None else (out[todo], rts[todo])
    while c.size:
        up = oend[c] < t
        if todo is None:  # the first round of every row: c is out itself, read before written below
            todo = np.flatnonzero(up)
            c, t = parent[c[todo]], t[todo]
        else:
            todo, c, t = todo[up], parent[c[up]], t[up]
        out[todo] = c
        up = c >= 0
        todo, c, t = todo[up], c[up], t[up]
    return out


def correlate(t: EventTables, *, compact: bool = False) -> Correlated:
    """Compute launch and op-stack links for all events in ``t``. ``compact``: ``op_parent`` as int32 where the
    rows fit (what the analysis uses while it runs: an int64 per op was its largest array), else int64."""
    rt = t.runtime
    codes = _thread_codes(t.ops, rt)  # once for both searches (they were a third of correlate's time at 2 GB)
    parent = _op_parents(t.ops, key_codes=codes[0], compact=compact)
    return Correlated(gpu_launch=_launches(rt["correlation"].to_numpy(), t.gpu["correlation"].to_numpy()),
                      runtime_op=_innermost_ops(rt, t.ops, parent, codes), op_parent=parent)


def _launches(corr: np.ndarray, g_corr: np.ndarray) -> np.ndarray:
    """Per GPU row (its correlation id ``g_corr``), the first runtime row with that id (``corr``), or -1; ids below
    0 are none. Was ``pd.Series(rows, index=ids).reindex(g_corr)``: a hash table over the runtime's ids, 0.37 s
    of 1M kernels at 2 GB; here the distinct ids (``np.unique`` gives each one's first row) index a dense table
    where they are about as many as its size, else are searched in sorted order."""
    out = np.full(len(g_corr), -1, dtype=np.int64)
    if corr.size == 0 or g_corr.size == 0:
        return out
    # every call with an id, and every GPU row too (the rule): rows are positions, and no compressed copies of the
    # ids, of the GPU rows' ids (twice) or of the results
    all_valid = bool((corr >= 0).all())
    valid = None if all_valid else np.flatnonzero(corr >= 0)  # None: every row
    if valid is not None and valid.size == 0:
        return out
    ids = corr if valid is None else corr[valid]
    if ids.size > 1 and not (ids[1:] > ids[:-1]).all():  # ids in call order already increase, as a rule: no sort
        ids, first = np.unique(ids, return_index=True)
        rows = first if valid is None else valid[first]
    else:
        rows = valid  # None: the rows are the positions
    all_hit = bool((g_corr >= 0).all())
    q = g_corr if all_hit else g_corr[g_corr >= 0]
    top = int(ids[-1])
    if top < 4 * ids.size + (1 << 16):
        table = np.full(top + 1, -1, dtype=np.int64)
        table[ids] = np.arange(ids.size) if rows is None else rows
        found = table[np.minimum(q, top)]
        found[q > top] = -1
    else:
        pos = _search_sorted(ids, q, "left")
        np.minimum(pos, ids.size - 1, out=pos)
        miss = ids[pos] != q
        found = pos if rows is None else rows[pos]
        found[miss] = -1
    if all_hit:
        return found.astype(np.int64, copy=False)
    out[g_corr >= 0] = found
    return out
