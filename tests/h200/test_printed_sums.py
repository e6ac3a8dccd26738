"""Every printed total equals the sum of its printed parts, on every committed breakdown
(terminal tables: per step wall = busy + idle, idle = launch + host work + queued/tail; each bucket column, ms
and %, adds up to the GPU busy row). PD runs: tests/disagg/test_pd_sums.py; ranks: tests/scale/test_waits.py.

Before: the graph 4K prefill printed idle 20.97 = 3.61 + 15.21 + 2.16 (20.98) and kernel % summing to 100.1."""

from __future__ import annotations

import subprocess
from decimal import Decimal
from pathlib import Path

import pytest

from phaseprof.report.json_io import load_breakdown
from phaseprof.report.table import _split, phase_rows

REPO = Path(__file__).resolve().parents[2]
BREAKDOWNS = [REPO / n for n in subprocess.check_output(["git", "ls-files", "traces"], cwd=REPO, text=True).split()
              if n.endswith("breakdown.json")]


def _d(text: str) -> Decimal:
    return Decimal(text.replace(",", "").replace("[bold]", "").replace("[/]", ""))


@pytest.mark.parametrize("path", BREAKDOWNS, ids=lambda p: str(p.relative_to(REPO / "traces")))
def test_printed_parts_add_up(path: Path) -> None:
    bd = load_breakdown(path)
    assert bd.phases
    for ph in bd.phases:
        wall, busy, idle, launch, host, queued = map(_d, _split(ph))
        assert launch + host + queued == idle, (ph.phase, _split(ph))  # printed as idle's indented parts
        s = ph.per_step
        if abs(s["wall_us"].mean - s["gpu_busy_us"].mean - s["gpu_idle_us"].mean) < 1:  # wall = busy + idle
            assert busy + idle == wall, (ph.phase, _split(ph))  # (not so with async scheduling: steps overlap)
        rows = phase_rows(ph, device=bd.trace.device)
        *parts, total = rows
        for col, want in ((1, _d(total[1])), (2, Decimal("100.0")), (3, _d(total[3])), (4, Decimal("100.0"))):
            got = sum((_d(r[col]) for r in parts if r[col] != "-"), Decimal(0))
            view_sums = abs(got - want) <= Decimal("0.05") * len(parts)  # a view that is not a partition
            assert got == want or not view_sums, (ph.phase, col, got, want)
