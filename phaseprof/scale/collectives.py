"""Who waits for whom: collective instances matched across ranks, each rank's time split into wait vs transfer.

A rank that reaches a collective first spins inside its kernel until the last peer arrives, so a collective
kernel's duration is ``wait + transfer``:

- *arrival* of rank r at instance i = start of r's kernel for i;
- ``wait`` = time from r's arrival to the last arrival (capped at r's kernel duration), ``transfer`` = the rest;
- *early* = last arrival - r's arrival, for every rank but the last: ``wait`` + the part its kernel had already
  ended by then (``early`` - ``wait``: the GPU recorded no wait, e.g. a collective whose kernels do not block);
  with two ranks one rank's early time is the other's lateness;
- the *late rank* of i is the last to arrive; its *lateness* = last arrival - first arrival, and what it was
  doing meanwhile explains why: ``compute`` (its GPU ran other kernels), ``launch_overhead`` (GPU idle while its
  host was inside launch calls), ``host_work`` (GPU idle, host busy elsewhere: Python, scheduling, syncs).

Instances are matched by (step, family, order within that step and family): ranks of one process group issue
their collectives in the same order. Times are compared across ranks, so the traces must share a clock: true for
ranks on one host (Kineto stamps GPU activity on the host clock); across hosts only as good as their clock sync.
The matched instances also feed the expert-parallel view (expert_parallel.py: dispatch/combine vs MoE compute).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from phaseprof.analysis import intervals as iv
from phaseprof.scale.expert_parallel import ExpertParallelReport, expert_parallel_report
from phaseprof.scale.instances import Instance
from phaseprof.scale.rank_task import RankCollectives

_US = 1e-3


@dataclass(frozen=True)
class LateCause:
    """What the late rank did while its peers waited (sums to its lateness)."""

    compute_us: float = 0.0
    launch_overhead_us: float = 0.0
    host_work_us: float = 0.0

    def __add__(self, o: "LateCause") -> "LateCause":
        return LateCause(self.compute_us + o.compute_us, self.launch_overhead_us + o.launch_overhead_us,
                         self.host_work_us + o.host_work_us)

    @property
    def total_us(self) -> float:
        return self.compute_us + self.launch_overhead_us + self.host_work_us

    @property
    def main(self) -> str:
        """The largest part: ``compute``, ``launch_overhead`` or ``host_work`` (``-`` when nothing)."""
        parts = {"compute": self.compute_us, "launch_overhead": self.launch_overhead_us,
                 "host_work": self.host_work_us}
        return max(parts, key=parts.__getitem__) if self.total_us > 0 else "-"


@dataclass(frozen=True)
class CollectiveStep:
    """One step's matched collectives. Dicts are keyed by rank."""

    step: int
    instances: int
    wait_us_by_rank: dict[int, float]
    transfer_us_by_rank: dict[int, float]
    lateness_us_by_rank: dict[int, float]  # summed over the instances where this rank arrived last
    late_rank: int | None  # the rank with the most lateness in this step
    late_cause: LateCause  # what the late rank did meanwhile


@dataclass(frozen=True)
class CollectiveReport:
    matched_instances: int
    unmatched_instances: int
    instances_by_family: dict[str, int]
    wait_us_by_rank: dict[int, float]
    transfer_us_by_rank: dict[int, float]
    lateness_us_by_rank: dict[int, float]
    late_count_by_rank: dict[int, int]  # instances where the rank arrived last
    cause_by_rank: dict[int, LateCause]
    steps: list[CollectiveStep]
    clock: str
    notes: list[str] = field(default_factory=list)
    expert_parallel: ExpertParallelReport | None = None  # EP dispatch/combine vs MoE compute (expert_parallel.py)
    early_us_by_rank: dict[int, float] = field(default_factory=dict)  # Σ (last arrival - its arrival): wait + ended


def _instance_keys(by_rank: dict[int, RankCollectives], ranks: list[int]) -> dict[int, np.ndarray]:
    """Per rank, each instance's key (step, family, k: its k-th occurrence of that family within its step) as
    one integer, comparable across ranks (int64 where the three fit, else Python ints)."""
    families = {f: i for i, f in enumerate(sorted({f for r in ranks for f in by_rank[r].family.tolist()}))}
    parts = {}
    for r in ranks:
        c = by_rank[r]
        fam = np.fromiter((families[f] for f in c.family.tolist()), dtype=np.int64, count=c.family.size)
        group = c.step.astype(np.int64) * len(families) + fam  # step >= -1: group >= -len(families)
        order = np.argsort(group, kind="stable")  # each group's rows in row order
        by_group = group[order]
        first = np.r_[True, by_group[1:] != by_group[:-1]] if order.size else np.zeros(0, dtype=bool)
        at = np.arange(order.size)
        k = np.empty(order.size, dtype=np.int64)
        k[order] = at - np.maximum.accumulate(np.where(first, at, 0))
        parts[r] = (group + len(families), k)  # groups from 0
    top_k = max((int(k.max()) + 1 for _, k in parts.values() if k.size), default=1)
    top_g = max((int(g.max()) + 1 for g, _ in parts.values() if g.size), default=1)
    wide = top_g * top_k >= 1 << 62
    return {r: (g.astype(object) * top_k + k.astype(object)) if wide else g * top_k + k for r, (g, k) in parts.items()}


def _sequential_sum(values: np.ndarray) -> float:
    """``values`` added one by one from 0.0, as a ``+=`` loop does (``np.sum`` adds pairwise: other last bits)."""
    return float(np.cumsum(values)[-1]) if values.size else 0.0


def _window_parts(c: RankCollectives, both: tuple[np.ndarray, np.ndarray], lo: np.ndarray, hi: np.ndarray
                  ) -> tuple[np.ndarray, ...]:
    """Per window ``[lo, hi)`` of one rank (ns): its length, its overlap with the rank's compute, with its launch
    calls, and with ``both`` (its launch calls intersected with its compute: launch time hidden behind GPU work).
    Each union is merged once for all windows (once per window set and step, it was most of the late
    causes' time)."""
    return (hi - lo, iv.overlap_with_union(lo, hi, c.compute_start_ns, c.compute_end_ns),
            iv.overlap_with_union(lo, hi, c.launch_start_ns, c.launch_end_ns),
            iv.overlap_with_union(lo, hi, both[0], both[1]))


def _cause(parts: tuple[np.ndarray, ...]) -> LateCause:
    """Split windows into compute / launch overhead / host work (summed), from their :func:`_window_parts`."""
    length, compute_ns, launch_ns, hidden_ns = parts
    if length.size == 0:
        return LateCause()
    total = length.astype(np.float64)
    compute = compute_ns.astype(np.float64)
    # Launch calls only explain lateness while the GPU was idle: drop the part that overlapped compute.
    launch = float(launch_ns.sum() - hidden_ns.sum())
    comp = float(compute.sum())
    return LateCause(comp * _US, launch * _US, max(float(total.sum()) - comp - launch, 0.0) * _US)


def match_collectives(by_rank: dict[int, RankCollectives], *, clock: str) -> CollectiveReport:
    """Match every rank's collective instances and split their time into wait and transfer.

    All instances and ranks at once as arrays (a loop over every instance and rank, 0.33-0.53 s of a
    16-rank ``--jobs 16`` run's 1.6 s, in the parent after the workers). Every sum adds its terms in instance order
    from 0.0, as that loop did: the same bits. Instances are in step order, then by rank 0's start, then by its
    row (the loop took ties of rank 0's start within a step, which real traces do not have, in a set's order)."""
    ranks = sorted(by_rank)
    keys = _instance_keys(by_rank, ranks)
    common = keys[ranks[0]]
    for r in ranks[1:]:
        common = np.intersect1d(common, keys[r], assume_unique=True)
    unmatched = sum(keys[r].size - common.size for r in ranks)
    rows = np.empty((len(ranks), common.size), dtype=np.int64)  # each rank's row of each instance
    for j, r in enumerate(ranks):
        sorter = np.argsort(keys[r], kind="stable")
        rows[j] = sorter[np.searchsorted(keys[r], common, sorter=sorter)]
    c0 = by_rank[ranks[0]]
    step0, start0 = c0.step[rows[0]].astype(np.int64), c0.start_ns[rows[0]].astype(np.int64)
    order = np.lexsort((rows[0], start0, step0))  # by step, then rank 0's start (then its order)
    rows = rows[:, order]
    step_of = step0[order]
    family_of = c0.family[rows[0]].tolist()
    start = np.stack([by_rank[r].start_ns[rows[j]].astype(np.int64) for j, r in enumerate(ranks)])
    dur = np.stack([by_rank[r].end_ns[rows[j]].astype(np.int64) for j, r in enumerate(ranks)]) - start
    last = start.max(axis=0, initial=np.iinfo(np.int64).min)
    first = start.min(axis=0, initial=np.iinfo(np.int64).max)
    late_j = len(ranks) - 1 - np.argmax((start == last)[::-1], axis=0)  # the last arrival; ties: the highest rank
    early = np.maximum(last - start, 0)
    waits = np.minimum(early, dur)
    wait_us, transfer_us = waits * _US, (dur - waits) * _US
    is_late = last > first
    late_by = [is_late & (late_j == j) for j in range(len(ranks))]
    lateness_us = (last - first) * _US
    wait = {r: _sequential_sum(wait_us[j]) for j, r in enumerate(ranks)}
    early_by = {r: _sequential_sum(early[j] * _US) for j, r in enumerate(ranks)}
    transfer = {r: _sequential_sum(transfer_us[j]) for j, r in enumerate(ranks)}
    late = {r: _sequential_sum(lateness_us[late_by[j]]) for j, r in enumerate(ranks)}
    late_n = {r: int(late_by[j].sum()) for j, r in enumerate(ranks)}
    fam: dict[str, int] = {}
    for f in family_of:
        fam[f] = fam.get(f, 0) + 1
    per_step: dict[int, dict] = {}
    bounds = np.flatnonzero(np.r_[True, step_of[1:] != step_of[:-1], True]) if step_of.size else np.zeros(1, int)
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        per_step[int(step_of[a])] = {
            "n": b - a,
            "wait": {r: _sequential_sum(wait_us[j, a:b]) for j, r in enumerate(ranks)},
            "transfer": {r: _sequential_sum(transfer_us[j, a:b]) for j, r in enumerate(ranks)},
            "late": {r: _sequential_sum(lateness_us[a:b][late_by[j][a:b]]) for j, r in enumerate(ranks)}}
    instances = [Instance(step=s, family=f, rows=dict(zip(ranks, rw)), start_ns=dict(zip(ranks, st)),
                          wait_ns=dict(zip(ranks, w)), dur_ns=dict(zip(ranks, d)))
                 for s, f, rw, st, w, d in zip(step_of.tolist(), family_of, rows.T.tolist(), start.T.tolist(),
                                               waits.T.tolist(), dur.T.tolist())]
    # the late rank's windows [first arrival, its arrival), in instance order
    windows = {r: (first[late_by[j]], last[late_by[j]], step_of[late_by[j]]) for j, r in enumerate(ranks)}
    cause_by_rank: dict[int, LateCause] = {}
    cause_by_rank_step: dict[tuple[int, int], LateCause] = {}
    for r in ranks:
        c = by_rank[r]
        lo, hi, st = windows[r]
        # per window: the same values whichever windows are asked with it
        parts = _window_parts(c, c.launch_hidden_ns, lo, hi)
        cause_by_rank[r] = _cause(parts)
        for s in np.unique(st).tolist():
            sel = st == s
            cause_by_rank_step[(r, s)] = _cause(tuple(p[sel] for p in parts))
    steps = []
    for s in sorted(per_step):
        ps = per_step[s]
        lr = max(ranks, key=lambda r: ps["late"][r]) if any(ps["late"].values()) else None
        steps.append(CollectiveStep(step=s, instances=ps["n"], wait_us_by_rank=ps["wait"],
                                    transfer_us_by_rank=ps["transfer"], lateness_us_by_rank=ps["late"],
                                    late_rank=lr,
                                    late_cause=cause_by_rank_step.get((lr, s), LateCause()) if lr is not None
                                    else LateCause()))
    notes = []
    if unmatched:
        notes.append(f"{unmatched} collective kernel(s) have no counterpart on every rank (different counts per "
                     "step and family) and are left out of the wait/transfer split")
    return CollectiveReport(matched_instances=int(common.size), unmatched_instances=unmatched, instances_by_family=fam,
                            wait_us_by_rank=wait, transfer_us_by_rank=transfer, lateness_us_by_rank=late,
                            late_count_by_rank=late_n, cause_by_rank=cause_by_rank, steps=steps, clock=clock,
                            notes=notes, expert_parallel=expert_parallel_report(by_rank, instances),
                            early_us_by_rank=early_by)
