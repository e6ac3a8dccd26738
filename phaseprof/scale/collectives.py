"""Who waits for whom: collective instances matched across ranks, each rank's time split into wait vs transfer.

A rank that reaches a collective first spins inside its kernel until the last peer arrives, so a collective
kernel's duration is ``wait + transfer``:

- *arrival* of rank r at instance i = start of r's kernel for i;
- ``wait`` = time from r's arrival to the last arrival (capped at r's kernel duration), ``transfer`` = the rest;
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


def _keys(c: RankCollectives) -> np.ndarray:
    """``step|family|k`` for each instance: its k-th occurrence of that family within its step."""
    out = np.empty(c.step.size, dtype=object)
    seen: dict[tuple[int, str], int] = {}
    for i, (s, f) in enumerate(zip(c.step.tolist(), c.family.tolist())):
        k = seen.get((s, f), 0)
        seen[(s, f)] = k + 1
        out[i] = (s, f, k)
    return out


def _cause(c: RankCollectives, both: tuple[np.ndarray, np.ndarray], lo: np.ndarray, hi: np.ndarray) -> LateCause:
    """Split the windows ``[lo, hi)`` of one rank into compute / launch overhead / host work (summed).
    ``both``: the rank's launch calls intersected with its compute (launch time hidden behind GPU work)."""
    if lo.size == 0:
        return LateCause()
    total = (hi - lo).astype(np.float64)
    compute = iv.overlap_with_union(lo, hi, c.compute_start_ns, c.compute_end_ns).astype(np.float64)
    # Launch calls only explain lateness while the GPU was idle: drop the part that overlapped compute.
    both_s, both_e = both
    launch = float(iv.overlap_with_union(lo, hi, c.launch_start_ns, c.launch_end_ns).sum()
                   - iv.overlap_with_union(lo, hi, both_s, both_e).sum())
    comp = float(compute.sum())
    return LateCause(comp * _US, launch * _US, max(float(total.sum()) - comp - launch, 0.0) * _US)


def match_collectives(by_rank: dict[int, RankCollectives], *, clock: str) -> CollectiveReport:
    """Match every rank's collective instances and split their time into wait and transfer."""
    ranks = sorted(by_rank)
    keys = {r: _keys(by_rank[r]) for r in ranks}
    index = {r: {k: i for i, k in enumerate(keys[r].tolist())} for r in ranks}
    common = set(index[ranks[0]])
    for r in ranks[1:]:
        common &= set(index[r])
    common_sorted = sorted(common, key=lambda k: (k[0], by_rank[ranks[0]].start_ns[index[ranks[0]][k]]))
    unmatched = sum(len(index[r]) - len(common) for r in ranks)
    z = {r: 0.0 for r in ranks}
    wait, transfer, late, late_n = dict(z), dict(z), dict(z), {r: 0 for r in ranks}
    fam: dict[str, int] = {}
    per_step: dict[int, dict] = {}
    instances: list[Instance] = []
    windows: dict[int, tuple[list[int], list[int], list[int]]] = {r: ([], [], []) for r in ranks}  # lo, hi, step
    for key in common_sorted:
        step, family, _ = key
        fam[family] = fam.get(family, 0) + 1
        rows = {r: index[r][key] for r in ranks}
        start = {r: int(by_rank[r].start_ns[rows[r]]) for r in ranks}
        end = {r: int(by_rank[r].end_ns[rows[r]]) for r in ranks}
        last_r = max(ranks, key=lambda r: (start[r], r))
        last, first = start[last_r], min(start.values())
        ps = per_step.setdefault(step, {"n": 0, "wait": dict(z), "transfer": dict(z), "late": dict(z)})
        ps["n"] += 1
        waits = {}
        for r in ranks:
            dur = end[r] - start[r]
            w = min(max(last - start[r], 0), dur)
            waits[r] = w
            wait[r] += w * _US
            transfer[r] += (dur - w) * _US
            ps["wait"][r] += w * _US
            ps["transfer"][r] += (dur - w) * _US
        instances.append(Instance(step=step, family=family, rows=rows, start_ns=start, wait_ns=waits,
                                  dur_ns={r: end[r] - start[r] for r in ranks}))
        if last > first:
            late[last_r] += (last - first) * _US
            late_n[last_r] += 1
            ps["late"][last_r] += (last - first) * _US
            lo, hi, st = windows[last_r]
            lo.append(first)
            hi.append(last)
            st.append(step)
    cause_by_rank: dict[int, LateCause] = {}
    cause_by_rank_step: dict[tuple[int, int], LateCause] = {}
    for r in ranks:
        c = by_rank[r]
        both = iv.intersect(c.launch_start_ns, c.launch_end_ns, c.compute_start_ns, c.compute_end_ns)
        lo, hi, st = (np.asarray(a, dtype=np.int64) for a in windows[r])
        cause_by_rank[r] = _cause(c, both, lo, hi)
        for s in np.unique(st).tolist():
            sel = st == s
            cause_by_rank_step[(r, s)] = _cause(c, both, lo[sel], hi[sel])
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
    return CollectiveReport(matched_instances=len(common), unmatched_instances=unmatched, instances_by_family=fam,
                            wait_us_by_rank=wait, transfer_us_by_rank=transfer, lateness_us_by_rank=late,
                            late_count_by_rank=late_n, cause_by_rank=cause_by_rank, steps=steps, clock=clock,
                            notes=notes, expert_parallel=expert_parallel_report(by_rank, instances))
