"""Expert-parallel dispatch and combine per rank and step, next to each rank's MoE compute.

Which matched collective is an EP **dispatch** or **combine** comes from collective_families.toml: by name
(DeepEP's dispatch/combine kernels; ``cached_notify`` takes the role of the rank's next one), or, only when the
run's record says expert parallelism was on, by place around the MoE compute ([[context]] rules: e.g. with
TP + EP at data_parallel_size 1 vLLM 0.23 combines the experts' outputs with the all-reduce after the MoE and
runs no dispatch kernel). Each instance's time is split into wait and transfer by the matching in
collectives.py. MoE compute = the rank's MoE bucket (kernel view) of the breakdown.

"The busiest rank sets the combine time": at a combine every rank waits for the last to arrive, and with equal
other work the last is the rank whose experts took longest. Per combine instance we compare the last arrival
with the rank that ran the most MoE kernel time since its previous collective, and correlate each other rank's
wait with its MoE deficit (busiest's MoE time minus its own), per instance and per step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from phaseprof.scale.families import EP_ROLES, NEXT, family_role
from phaseprof.scale.instances import Instance
from phaseprof.scale.rank_task import RankCollectives

_US = 1e-3
NONE_FOUND = "no expert-parallel collectives found"


@dataclass(frozen=True)
class EPStep:
    """One step. Dicts keyed by rank, times in microseconds; wait + transfer = the rank's kernel time."""

    step: int
    moe_us_by_rank: dict[int, float]  # MoE bucket, kernel view (breakdown)
    dispatch_wait_us_by_rank: dict[int, float]
    dispatch_transfer_us_by_rank: dict[int, float]
    combine_wait_us_by_rank: dict[int, float]
    combine_transfer_us_by_rank: dict[int, float]
    busiest_rank: int  # most MoE compute in this step
    combine_late_rank: int | None  # the rank the others waited for longest at combines (None: nobody waited)


@dataclass(frozen=True)
class CombineTracking:
    """Does the combine wait follow the other ranks' MoE compute? ``*_r``: Pearson r, None with fewer than 3
    points or no spread."""

    combine_instances: int
    late_is_busiest: int  # instances whose last arrival is the rank with the most MoE time before the combine
    instance_points: int  # (instance, rank other than the busiest) pairs behind instance_wait_vs_moe_gap_r
    instance_wait_vs_moe_gap_r: float | None  # wait vs (busiest's MoE time before the combine - own)
    step_points: int
    step_wait_vs_moe_gap_r: float | None  # per step and rank: combine wait vs (step's max MoE - own)
    combine_wait_us: float  # every rank's wait at these combine instances
    moe_gap_covers_us: float  # of it, what the MoE deficits can account for: sum of min(deficit, wait) (0 for
    # the busiest rank, whose wait no MoE deficit explains)

    @property
    def moe_explains_pct(self) -> float:
        """At most this share of the combine wait is the busiest rank's extra MoE compute; the rest is the late
        rank's other work (the who-waits-for-whom causes)."""
        return 100 * self.moe_gap_covers_us / self.combine_wait_us if self.combine_wait_us else 0.0


@dataclass(frozen=True)
class ExpertParallelReport:
    found: bool
    summary: str  # one line; starts with NONE_FOUND when no instance has an EP role
    declared: bool | None  # the run record's expert_parallel (None: no record)
    dispatch_instances: int
    combine_instances: int
    how: dict[str, int]  # "<family> <role> (<rule>)" -> instances
    moe_us_by_rank: dict[int, float]  # summed over the steps below
    dispatch_wait_us_by_rank: dict[int, float]
    dispatch_transfer_us_by_rank: dict[int, float]
    combine_wait_us_by_rank: dict[int, float]
    combine_transfer_us_by_rank: dict[int, float]
    steps: list[EPStep]
    tracking: CombineTracking | None
    notes: list[str] = field(default_factory=list)


def _row_roles(c: RankCollectives, ep_on: bool) -> tuple[list[str | None], list[str | None]]:
    """Per collective of one rank: its EP role (or None) and the rule that gave it; with ``ep_on`` False the
    second list holds what the context rules *would* give (candidates, for the note)."""
    roles, context = c.ep_roles
    if ep_on:
        return [r if r is not None else x for r, x in zip(roles, context)], [None] * len(roles)
    return roles, context


def _r(x: list[float], y: list[float]) -> float | None:
    if len(x) < 3 or np.std(x) == 0 or np.std(y) == 0:
        return None
    return float(np.corrcoef(x, y)[0, 1])


def expert_parallel_report(by_rank: dict[int, RankCollectives], instances: list[Instance]) -> ExpertParallelReport:
    """EP roles of the matched instances and their time per step and rank, against each rank's MoE compute.
    A run counts as expert-parallel when any rank's record says so."""
    ranks = sorted(by_rank)
    said = {by_rank[r].expert_parallel for r in ranks}
    declared = True if True in said else (False if False in said else None)
    per_rank = {r: _row_roles(by_rank[r], declared is True) for r in ranks}
    first = ranks[0]
    z = {r: 0.0 for r in ranks}
    steps: dict[int, dict[str, dict[int, float]]] = {}
    how: dict[str, int] = {}
    candidates: dict[str, int] = {}
    n = {"dispatch": 0, "combine": 0}
    combines = late_busy = 0
    gap_us: list[float] = []  # per (combine instance, rank other than the busiest): busiest's MoE - own
    wait_us: list[float] = []  # that rank's wait at the combine
    combine_wait = 0.0  # every rank's combine wait (us)
    for ins in instances:
        # Ranks of one group issue the same collectives around the same layers: the first rank's role stands.
        role = per_rank[first][0][ins.rows[first]]
        if role is None:
            cand = per_rank[first][1][ins.rows[first]]
            if cand is not None:
                candidates[f"{ins.family} {cand}"] = candidates.get(f"{ins.family} {cand}", 0) + 1
            continue
        named = family_role(ins.family) in EP_ROLES or family_role(ins.family) == NEXT
        key = f"{ins.family} {role} ({'name' if named else 'place'})"
        how[key] = how.get(key, 0) + 1
        n[role] += 1
        st = steps.setdefault(ins.step, {k: dict(z) for k in ("dw", "dt", "cw", "ct", "late")})
        w, t = ("dw", "dt") if role == "dispatch" else ("cw", "ct")
        for r in ranks:
            st[w][r] += ins.wait_ns[r] * _US
            st[t][r] += (ins.dur_ns[r] - ins.wait_ns[r]) * _US
        if role != "combine" or len(ranks) < 2:
            continue
        last = max(ranks, key=lambda r: (ins.start_ns[r], r))
        st["late"][last] += (ins.start_ns[last] - min(ins.start_ns.values())) * _US
        moe = {r: float(by_rank[r].moe_before_us[ins.rows[r]]) for r in ranks}
        busiest = max(ranks, key=lambda r: (moe[r], -r))
        combines += 1
        late_busy += int(last == busiest)
        combine_wait += sum(ins.wait_ns[r] for r in ranks) * _US
        for r in ranks:
            if r != busiest:
                gap_us.append(moe[busiest] - moe[r])
                wait_us.append(ins.wait_ns[r] * _US)
    ep_steps = []
    sx: list[float] = []
    sy: list[float] = []
    for s in sorted(steps):
        d = steps[s]
        moe = {r: by_rank[r].moe_us_by_step.get(s, 0.0) for r in ranks}
        busiest = max(ranks, key=lambda r: (moe[r], -r))
        late = max(ranks, key=lambda r: d["late"][r]) if any(d["late"].values()) else None
        ep_steps.append(EPStep(step=s, moe_us_by_rank=moe, dispatch_wait_us_by_rank=d["dw"],
                               dispatch_transfer_us_by_rank=d["dt"], combine_wait_us_by_rank=d["cw"],
                               combine_transfer_us_by_rank=d["ct"], busiest_rank=busiest, combine_late_rank=late))
        for r in ranks:
            if r != busiest:
                sx.append(moe[busiest] - moe[r])
                sy.append(d["cw"][r])
    tot = lambda k: {r: sum(getattr(s, k)[r] for s in ep_steps) for r in ranks}  # noqa: E731
    track = None
    if combines:
        track = CombineTracking(combine_instances=combines, late_is_busiest=late_busy, instance_points=len(gap_us),
                                instance_wait_vs_moe_gap_r=_r(gap_us, wait_us), step_points=len(sx),
                                step_wait_vs_moe_gap_r=_r(sx, sy), combine_wait_us=combine_wait,
                                moe_gap_covers_us=float(sum(min(max(g, 0.0), w) for g, w in zip(gap_us, wait_us))))
    found = bool(n["dispatch"] or n["combine"])
    notes = []
    if found and len(ranks) == 1:
        notes.append("one rank: no peer to wait for, so its whole dispatch/combine kernel time counts as transfer")
    if found:
        summary = (f"expert parallel: {n['dispatch']} dispatch and {n['combine']} combine instances over "
                   f"{len(ep_steps)} step(s)")
        if n["dispatch"] == 0 and any("(place)" in k for k in how):
            notes.append("no dispatch kernel: with data_parallel_size 1 every rank already holds every token")
    else:
        said_txt = {True: "the run record says expert parallelism was on",
                    False: "the run record says expert parallelism was off",
                    None: "no run record says whether expert parallelism was on"}[declared]
        summary = f"{NONE_FOUND} ({said_txt})"
        if candidates:
            what = ", ".join(f"{v} {k}" for k, v in sorted(candidates.items()))
            notes.append(f"by place around the MoE compute these would be EP collectives ({what}); with expert "
                         "parallelism off they are the tensor-parallel MoE reduce")
    return ExpertParallelReport(
        found=found, summary=summary, declared=declared, dispatch_instances=n["dispatch"],
        combine_instances=n["combine"], how=dict(sorted(how.items())), moe_us_by_rank=tot("moe_us_by_rank"),
        dispatch_wait_us_by_rank=tot("dispatch_wait_us_by_rank"),
        dispatch_transfer_us_by_rank=tot("dispatch_transfer_us_by_rank"),
        combine_wait_us_by_rank=tot("combine_wait_us_by_rank"),
        combine_transfer_us_by_rank=tot("combine_transfer_us_by_rank"), steps=ep_steps, tracking=track,
        notes=notes)
