"""The breakdown's ``verdicts`` section (schema 1.2), computed by ``analysis.verdict``."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class PhaseVerdict:
    """``line``: the verdict as printed. ``busy_pct``: GPU busy (CPU op time on a CPU trace) % of the phase's
    wall; the idle split in % of wall; ``top_bucket``: the largest kernel-view bucket, its % of busy time and
    % of its speed of light (None without a SOL section). ``views``: notes where the two views differ."""

    phase: str
    bound: str
    line: str
    busy_pct: float
    launch_pct: float
    host_work_pct: float
    other_idle_pct: float
    top_bucket: str | None
    top_bucket_pct: float
    top_bucket_pct_of_light: float | None
    views: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Verdicts:
    phases: list[PhaseVerdict]
    noise: list[str] = field(default_factory=list)  # why the timings may be disturbed; empty when they look clean
