"""The Breakdown page's speed-of-light section on a real H200 graph-mode capture: the roofline and the table show
the ``sol`` section that ``phaseprof.sol.attach`` computes for the same run (the one ``phaseprof analyze`` prints),
with the measured H200 ceilings found in a ``ceilings/`` folder above the run."""

from __future__ import annotations

import shutil

import pytest

from phaseprof.report.json_io import load_breakdown
from phaseprof.sol.attach import attach_sol
from tests.conftest import REPO

from .conftest import figure, frame, ok

RUN = REPO / "traces/h200/graph/20261130T094740Z-h200-qwen3.5-35b-a3b-prefill-4096"
CEILINGS = REPO / "traces/h200/ceilings/h200-measured.json"


@pytest.fixture()
def h200_runs(tmp_path):
    runs = tmp_path / "runs"
    shutil.copytree(RUN, runs / RUN.name)
    (runs / "ceilings").mkdir()
    shutil.copy(CEILINGS, runs / "ceilings")
    return runs


def test_roofline_and_sol_table_are_the_analysis_numbers(make_app, h200_runs):
    at = make_app("Breakdown", runs=h200_runs)
    at.session_state["current_run"] = RUN.name
    ok(at.run())
    sol = attach_sol(load_breakdown(h200_runs / RUN.name / "breakdown.json"), source=h200_runs / RUN.name).sol
    assert sol.ok and sol.ceiling.kind == "measured"
    df = frame(at, "bucket", "% of light", "floor ms")
    expected = [b for ph in sol.phases for b in ph.buckets]
    assert df["bucket"].tolist() == [b.bucket for b in expected]
    assert df["floor ms"].tolist() == pytest.approx([b.floor_us / 1e3 for b in expected])
    moe = df[df["bucket"] == "moe"].iloc[0]
    assert 0 < moe["% of light"] < 100
    fig = figure(at, "roofline")
    points = {t["name"]: t for t in fig["data"]}
    assert "prefill" in points and "moe" in points["prefill"]["text"]
