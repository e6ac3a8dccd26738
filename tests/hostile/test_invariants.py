"""The invariants every Breakdown must pass before output hold on the committed real runs, and a breakdown that
breaks one (numbers once seen on hostile input: busy > wall, a negative idle part) is refused with one line."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from phaseprof.analysis.invariants import broken_invariants, checked
from phaseprof.analysis.pipeline import analyze_trace
from phaseprof.errors import TraceError
from phaseprof.report.json_io import load_breakdown

from ..conftest import REPO

RUNS = sorted(REPO.glob("traces/h200/*/*/breakdown.json"))


@pytest.mark.parametrize("path", RUNS, ids=lambda p: p.parent.name)
def test_committed_breakdowns_hold(path: Path) -> None:
    assert broken_invariants(load_breakdown(path)) == []


def test_cpu_trace_holds() -> None:
    bd = analyze_trace(REPO / "traces/cpu/tiny-hybrid-prefill128-decode8/trace.json.gz")
    assert bd.steps and broken_invariants(bd) == []


def _with_step(bd, **changes):  # type: ignore[no-untyped-def]
    return dataclasses.replace(bd, steps=[dataclasses.replace(bd.steps[0], **changes), *bd.steps[1:]])


@pytest.mark.parametrize("change, phrase", [
    (lambda r: {"gpu_busy_us": r.wall_us * 2}, "outside 0..wall"),
    (lambda r: {"idle": dataclasses.replace(r.idle, host_work_us=-1.84e16)}, "negative idle part"),
    (lambda r: {"busy_pct": 1.16e14}, "busy"),
    (lambda r: {"wall_us": float("inf")}, "is inf"),
    (lambda r: {"kernel_view_us": {**r.kernel_view_us, "gemm": r.kernel_view_us.get("gemm", 0.0) + 5.0}},
     "kernel-view buckets sum"),
])
def test_broken_invariant_is_an_error(change, phrase: str) -> None:  # type: ignore[no-untyped-def]
    bd = load_breakdown(RUNS[0])
    bad = _with_step(bd, **change(bd.steps[0]))
    with pytest.raises(TraceError, match=phrase) as e:
        checked(bad)
    assert bd.trace.path in str(e.value) and "\n" not in str(e.value)
