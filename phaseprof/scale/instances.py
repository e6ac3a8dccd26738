"""One collective matched across ranks: what collectives.py's matching produces and the views built on it
(expert_parallel.py) read."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Instance:
    """One collective matched across ranks, keyed by rank: its row in that rank's ``RankCollectives``, its
    kernel's start, its wait (start to the last rank's arrival, capped at the kernel's duration) and its
    duration. Times in ns on the traces' shared clock."""

    step: int
    family: str
    rows: dict[int, int]
    start_ns: dict[int, int]
    wait_ns: dict[int, int]
    dur_ns: dict[int, int]
