"""How the multi-rank numbers of one wait relate, and which rank mostly waits on which.

Three numbers describe one wait, each defined in ``collectives.py``:

- **late by** (a rank): summed over the collectives where it arrived last, last arrival - first arrival; split
  into what it was doing meanwhile: compute + launch + host work (``LateCause``, it sums);
- **early** (every other rank): summed over the collectives where it was not last, last arrival - its arrival;
  with two ranks it equals the other's lateness. early = **waited** (inside its collective kernel until the last
  rank arrived) + **kernel already over** (its kernel had ended before the last one began: no wait on its GPU);
- **c.wait** (expert parallel): the part of *waited* spent in the EP combine collectives; *waited* = d.wait +
  c.wait + the other collectives' wait.

A rank *waits on* another when most of its GPU busy time is spent waiting in collectives
(``WAITING_BUSY_PCT``); the one it waits on is the rank late most often against it (the most lateness overall).
"""

from __future__ import annotations

from dataclasses import dataclass

from phaseprof.scale.collectives import CollectiveReport

#: A rank whose collective wait is at least this share of its GPU busy time is "waiting on" the late rank.
WAITING_BUSY_PCT = 50.0


@dataclass(frozen=True)
class RankWait:
    """One rank's wait, as parts that add up (ms). ``waiting_on``: the late rank it mostly waits for when its
    wait is at least ``WAITING_BUSY_PCT`` of its GPU busy time, else None."""

    rank: int
    early_ms: float
    waited_ms: float
    ended_ms: float  # early - waited: its kernel had ended before the last rank's began
    dispatch_wait_ms: float
    combine_wait_ms: float
    other_wait_ms: float  # waited - dispatch - combine
    busy_ms: float
    waiting_on: int | None

    @property
    def waited_pct_of_busy(self) -> float:
        return 100 * self.waited_ms / self.busy_ms if self.busy_ms else 0.0


def late_rank(c: CollectiveReport) -> int | None:
    """The rank with the most lateness (None when no rank was late)."""
    late = {r: v for r, v in c.lateness_us_by_rank.items() if v > 0}
    return max(late, key=late.__getitem__) if late else None


def rank_waits(c: CollectiveReport, busy_us_by_rank: dict[int, float]) -> list[RankWait]:
    """Every rank's wait split into parts that add up; ``busy_us_by_rank``: each rank's GPU busy time."""
    ep = c.expert_parallel
    late = late_rank(c)
    out = []
    for r in sorted(c.wait_us_by_rank):
        waited = c.wait_us_by_rank[r] / 1e3
        early = c.early_us_by_rank.get(r, c.wait_us_by_rank[r]) / 1e3
        d = (ep.dispatch_wait_us_by_rank.get(r, 0.0) if ep else 0.0) / 1e3
        cw = (ep.combine_wait_us_by_rank.get(r, 0.0) if ep else 0.0) / 1e3
        busy = busy_us_by_rank.get(r, 0.0) / 1e3
        waits = late is not None and late != r and busy > 0 and 100 * waited / busy >= WAITING_BUSY_PCT
        out.append(RankWait(rank=r, early_ms=early, waited_ms=waited, ended_ms=early - waited, dispatch_wait_ms=d,
                            combine_wait_ms=cw, other_wait_ms=waited - d - cw, busy_ms=busy,
                            waiting_on=late if waits else None))
    return out


def _ms(v: float) -> str:
    return f"{v:,.2f}"


def waterfall_lines(c: CollectiveReport, busy_us_by_rank: dict[int, float]) -> list[str]:
    """The waits as sums (ms), each printed total the sum of its printed parts: every late rank's lateness by
    cause, then every rank that arrived early: early = waited + kernel already over, and waited by collective
    kind. With two ranks, one rank's early time is the other's lateness."""
    lines = []
    for r in sorted(c.lateness_us_by_rank, key=lambda r: -c.lateness_us_by_rank[r]):
        if c.lateness_us_by_rank[r] <= 0:
            continue
        cause = c.cause_by_rank[r]
        parts = [round(cause.compute_us / 1e3, 2), round(cause.launch_overhead_us / 1e3, 2),
                 round(cause.host_work_us / 1e3, 2)]
        lines.append(f"rank {r} was last to arrive {c.late_count_by_rank[r]}x; late by {_ms(sum(parts))} = compute "
                     f"{_ms(parts[0])} + launch {_ms(parts[1])} + host work {_ms(parts[2])}")
    if not lines:
        return ["no rank arrived last at any collective: nobody waited"]
    for w in rank_waits(c, busy_us_by_rank):
        waited, ended = round(w.waited_ms, 2), round(w.ended_ms, 2)
        if waited + ended <= 0:
            continue
        lines.append(f"rank {w.rank} arrived early by {_ms(waited + ended)} = waited in its kernel {_ms(waited)} "
                     f"+ kernel already over {_ms(ended)}")
        kinds = [(n, round(v, 2)) for n, v in (("EP dispatch (d.wait)", w.dispatch_wait_ms),
                                               ("EP combine (c.wait)", w.combine_wait_ms)) if v > 0]
        if kinds:
            other = round(waited - sum(v for _, v in kinds), 2)
            lines.append(f"  waited {_ms(waited)} = " + " + ".join(f"{n} {_ms(v)}" for n, v in kinds)
                         + f" + other collectives {_ms(other)}")
    return lines


def rank_verdicts(c: CollectiveReport | None, busy_us_by_rank: dict[int, float]) -> dict[int, str]:
    """One line per rank that mostly waits: "waiting on rank N — X% of its GPU busy ...". Ranks that do not
    wait are left to their own phase verdicts (``analysis.verdict``)."""
    if c is None:
        return {}
    late = late_rank(c)
    why = c.cause_by_rank[late].main.replace("_", " ") if late is not None else ""
    return {w.rank: (f"waiting on rank {w.waiting_on} — {w.waited_pct_of_busy:.0f}% of its GPU busy "
                     f"({_ms(w.waited_ms)} of {_ms(w.busy_ms)} ms) inside collectives until rank {w.waiting_on} "
                     f"arrived; rank {w.waiting_on} was late by {why}")
            for w in rank_waits(c, busy_us_by_rank) if w.waiting_on is not None}
