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


def _op_parents(ops: pd.DataFrame) -> np.ndarray:
    parent = np.full(len(ops), -1, dtype=np.int64)
    if ops.empty:
        return parent
    ts = ops["ts_ns"].to_numpy()
    end = ops["end_ns"].to_numpy()
    order = np.lexsort((-(end - ts), ts, ops["tid"].cat.codes.to_numpy(), ops["pid"].cat.codes.to_numpy()))
    tid = ops["tid"].cat.codes.to_numpy()[order]
    pid = ops["pid"].cat.codes.to_numpy()[order]
    stack: list[int] = []
    prev_key = None
    for k, i in enumerate(order.tolist()):
        key = (pid[k], tid[k])
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
    return parent


def _innermost_ops(runtime: pd.DataFrame, ops: pd.DataFrame, parent: np.ndarray) -> np.ndarray:
    out = np.full(len(runtime), -1, dtype=np.int64)
    if runtime.empty or ops.empty:
        return out
    ots, oend = ops["ts_ns"].to_numpy(), ops["end_ns"].to_numpy()
    okey = ops["pid"].astype(str) + "/" + ops["tid"].astype(str)
    rkey = runtime["pid"].astype(str) + "/" + runtime["tid"].astype(str)
    rts = runtime["ts_ns"].to_numpy()
    for key, ridx in rkey.groupby(rkey, observed=True).indices.items():
        oidx = np.flatnonzero((okey == key).to_numpy())
        if oidx.size == 0:
            continue
        oidx = oidx[np.argsort(ots[oidx], kind="stable")]
        starts = ots[oidx]
        pos = np.searchsorted(starts, rts[ridx], side="right") - 1
        for r, p in zip(ridx.tolist(), pos.tolist()):
            c = int(oidx[p]) if p >= 0 else -1
            t = rts[r]
            while c >= 0 and oend[c] < t:
                c = int(parent[c])
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
