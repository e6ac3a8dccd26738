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


def _thread_keys(frame: pd.DataFrame) -> np.ndarray:
    """One string per row naming its host thread ("pid/tid"), comparable across tables. Strings are built once
    per distinct thread, not per row."""
    pc, tc = frame["pid"].cat.codes.to_numpy(), frame["tid"].cat.codes.to_numpy()
    pair = pc.astype(np.int64) * (len(frame["tid"].cat.categories) + 1) + tc
    uniq, inv = np.unique(pair, return_inverse=True)
    pcat, tcat = frame["pid"].cat.categories, frame["tid"].cat.categories
    n_t = len(tcat) + 1
    names = np.asarray([f"{pcat[u // n_t]}/{tcat[u % n_t]}" for u in uniq.tolist()], dtype=object)
    return names[inv.reshape(-1)]


def _op_parents(ops: pd.DataFrame) -> np.ndarray:
    parent = [-1] * len(ops)
    if ops.empty:
        return np.asarray(parent, dtype=np.int64)
    ts_a = ops["ts_ns"].to_numpy()
    end_a = ops["end_ns"].to_numpy()
    key_codes = pd.factorize(_thread_keys(ops))[0]
    order = np.lexsort((-(end_a - ts_a), ts_a, key_codes))
    # Plain Python lists: this sweep is inherently sequential, and list indexing is ~5x faster than numpy scalars.
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


def _innermost_ops(runtime: pd.DataFrame, ops: pd.DataFrame, parent: np.ndarray) -> np.ndarray:
    out = np.full(len(runtime), -1, dtype=np.int64)
    if runtime.empty or ops.empty:
        return out
    ots, oend = ops["ts_ns"].to_numpy(), ops["end_ns"].to_numpy()
    okey = _thread_keys(ops)
    rkey = _thread_keys(runtime)
    rts = runtime["ts_ns"].to_numpy()
    parents = parent.tolist()
    oend_l = oend.tolist()
    rts_l = rts.tolist()
    for key, ridx in pd.Series(rkey).groupby(rkey).indices.items():
        oidx = np.flatnonzero(okey == key)
        if oidx.size == 0:
            continue
        oidx = oidx[np.argsort(ots[oidx], kind="stable")]
        pos = np.searchsorted(ots[oidx], rts[ridx], side="right") - 1
        cand = np.where(pos >= 0, oidx[np.maximum(pos, 0)], -1).tolist()
        for r, c in zip(ridx.tolist(), cand):
            t = rts_l[r]
            while c >= 0 and oend_l[c] < t:
                c = parents[c]
            out[r] = c
    return out


def correlate(t: EventTables) -> Correlated:
    """Compute launch and op-stack links for all events in ``t``."""
    rt = t.runtime
    corr = rt["correlation"].to_numpy()
    valid = corr >= 0
    lookup = pd.Series(np.flatnonzero(valid), index=corr[valid])
    lookup = lookup[~lookup.index.duplicated(keep="first")]
    g_corr = t.gpu["correlation"].to_numpy()
    gpu_launch = lookup.reindex(g_corr).fillna(-1).to_numpy(dtype=np.int64).copy()
    gpu_launch[g_corr < 0] = -1
    parent = _op_parents(t.ops)
    return Correlated(gpu_launch=gpu_launch, runtime_op=_innermost_ops(rt, t.ops, parent), op_parent=parent)
