"""Trim CPU ops from a trace that is over its size limit, keeping what the analysis stands on.

Why: the same capture records very different numbers of CPU ops on different CPUs. On an AVX2-only x86-64 CPU
torch runs a bf16 depthwise convolution group by group (6,144 ``aten::_slow_conv2d_forward`` per 128-token
tiny-hybrid prefill, 76,004 CPU ops, 1.7 MB) where an AVX-512 CPU makes one oneDNN call (~3,300 ops, 70 KB).
A size bound therefore has to be enforced by trimming, not assumed.

What goes, in this order, only while the trace is still too big:
1. **loops**: the children (and their subtrees) of a CPU op that calls one op more than ``REPEAT_LIMIT`` times
   directly (e.g. the per-group convolution); the parent's duration still covers them, as its self time.
2. **deepest levels**: all CPU ops at the deepest nesting level, one level at a time, never the top-level ops.
Never touched: step markers (``user_annotation``), module scopes (``nn.Module: …``), runtime/driver calls
(launches), GPU kernels, memcpys, memsets, flows and metadata. Nesting is per thread (``pid``, ``tid``), by time
containment.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from phaseprof.trace.tables import MODULE_PREFIX

REPEAT_LIMIT = 64  # direct calls of one op name by one parent op; a real loop, not a module's few ops

Event = dict[str, Any]


def _is_cpu_op(e: Event) -> bool:
    # module scopes of ``--hierarchy hooks`` are cpu_op events too, but structure: never trimmed here
    return e.get("ph") == "X" and e.get("cat") == "cpu_op" and not str(e.get("name", "")).startswith(MODULE_PREFIX)


def cpu_op_tree(events: list[Event]) -> tuple[list[int], np.ndarray, np.ndarray]:
    """Indices of the CPU ops in ``events``, and per op its parent's position in that list (-1: top level) and
    depth (1: top level). Containment per (pid, tid); an op starting inside another and ending after it (clock
    rounding) still counts as its child."""
    idx = [i for i, e in enumerate(events) if _is_cpu_op(e)]
    n = len(idx)
    parent = np.full(n, -1, dtype=np.int64)
    depth = np.ones(n, dtype=np.int64)
    ts = [float(events[i].get("ts", 0)) for i in idx]
    end = [t + float(events[i].get("dur", 0) or 0) for t, i in zip(ts, idx)]
    thread = [(events[i].get("pid"), events[i].get("tid")) for i in idx]
    order = sorted(range(n), key=lambda k: (thread[k], ts[k], -end[k]))
    stack: list[int] = []
    current: object = None
    for k in order:
        if thread[k] != current:
            stack, current = [], thread[k]
        while stack and ts[k] >= end[stack[-1]]:
            stack.pop()
        if stack:
            parent[k] = stack[-1]
            depth[k] = depth[stack[-1]] + 1
        stack.append(k)
    return idx, parent, depth


def loop_ops(events: list[Event], idx: list[int], parent: np.ndarray, depth: np.ndarray,
             limit: int = REPEAT_LIMIT) -> np.ndarray:
    """Mask over ``idx``: ops inside loops (a parent calling one name more than ``limit`` times), subtrees too."""
    names = [events[i].get("name") for i in idx]
    calls = Counter((int(p), names[k]) for k, p in enumerate(parent) if p >= 0)
    looped = {key for key, c in calls.items() if c > limit}
    drop = np.zeros(len(idx), dtype=bool)
    for k in np.argsort(depth, kind="stable").tolist():  # parents before children
        p = int(parent[k])
        if p >= 0 and (drop[p] or (p, names[k]) in looped):
            drop[k] = True
    return drop


def drop_loops(events: list[Event], *, limit: int = REPEAT_LIMIT) -> tuple[list[Event], str | None]:
    """Events without the CPU ops inside loops, and a line saying what went (None if nothing did)."""
    idx, parent, depth = cpu_op_tree(events)
    loops = loop_ops(events, idx, parent, depth, limit)
    if not loops.any():
        return events, None
    gone = set(np.asarray(idx)[loops].tolist())
    parents = len({int(parent[k]) for k in np.flatnonzero(loops) if not loops[parent[k]]})
    note = (f"{int(loops.sum())} CPU ops inside loops (more than {limit} calls of one op by {parents} parent "
            "op(s), which keep the time as self time)")
    return [e for i, e in enumerate(events) if i not in gone], note


def drop_deepest_levels(events: list[Event], *, too_big: Callable[[list[Event]], bool]) -> tuple[list[Event],
                                                                                                 list[str]]:
    """Drop the deepest level of CPU ops, then the next, while ``too_big``; top-level ops always stay."""
    idx, _parent, depth = cpu_op_tree(events)
    pos = np.asarray(idx, dtype=np.int64)
    gone = np.zeros(len(events), dtype=bool)
    alive = np.ones(len(idx), dtype=bool)
    notes: list[str] = []
    out = events
    while too_big(out) and alive.any():
        deepest = int(depth[alive].max())
        if deepest <= 1:
            break
        level = alive & (depth == deepest)
        gone[pos[level]] = True
        alive &= ~level
        notes.append(f"{int(level.sum())} CPU ops at nesting depth {deepest}")
        out = [e for e, g in zip(events, gone) if not g]
    return out, notes
