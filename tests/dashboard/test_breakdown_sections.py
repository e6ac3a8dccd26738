"""The Breakdown page's analysis sections on real H200 traces: speed of light (roofline and per-bucket table from
``phaseprof.sol``, measured ceilings found above the run) and attribution (coverage per method, the layers x buckets
heat map), each showing exactly what the analysis computed for the same run."""

from __future__ import annotations

import shutil

import pytest

from phaseprof.dashboard.charts import BUCKET_COLORS
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
    # Points coloured by bucket, as in every other chart (issue 25: the roofline was all grey).
    assert points["prefill"]["marker"]["color"] == [BUCKET_COLORS[b] for b in points["prefill"]["text"]]



def test_a_run_without_breakdown_shows_its_analysed_traces_sol(make_app, h200_runs):
    """Only the trace and run.json: the page shows the section of the trace's AnalysedTrace, the one
    ``phaseprof analyze`` of the same directory prints (measured ceilings found above the run)."""
    from phaseprof.analysis.pipeline import analyze
    from phaseprof.sol.attach import analysed_sol

    (h200_runs / RUN.name / "breakdown.json").unlink()
    at = make_app("Breakdown", runs=h200_runs)
    at.session_state["current_run"] = RUN.name
    ok(at.run())
    sol = analysed_sol(analyze(h200_runs / RUN.name / "trace.json.gz"))
    assert sol.ok and sol.ceiling.kind == "measured"
    df = frame(at, "bucket", "% of light", "floor ms")
    expected = [b for ph in sol.phases for b in ph.buckets]
    assert df["bucket"].tolist() == [b.bucket for b in expected]
    assert df["floor ms"].tolist() == pytest.approx([b.floor_us / 1e3 for b in expected])
    assert df["% of light"].tolist() == pytest.approx([b.pct_of_light for b in expected])

OWN_EAGER = REPO / "traces/h200/own-eager/vllm-own-eager-prefill4096-decode1.pt.trace.json.gz"


def test_layer_heatmap_and_coverage_are_the_attribution_section(make_app, tmp_path):
    """vLLM's own eager trace with stacks: coverage per method and the 40 decoder layers as the analysis has them."""
    from phaseprof.analysis.pipeline import analyze_trace

    runs = tmp_path / "runs"
    runs.mkdir()
    shutil.copy(OWN_EAGER, runs)
    at = make_app("Breakdown", runs=runs)
    at.session_state["current_run"] = OWN_EAGER.name
    at.session_state["bd_phase"] = "prefill"
    ok(at.run())
    bd = analyze_trace(OWN_EAGER)
    prefill = next(p for p in bd.attribution.phases if p.phase == "prefill")
    layers = frame(at, "layer", "type", "share %")
    assert layers["layer"].tolist() == [r.layer for r in prefill.layers] == list(range(40))
    assert layers["ms"].tolist() == pytest.approx([r.time_us / 1e3 for r in prefill.layers])
    assert set(layers["type"]) == {"gdn+moe", "attention+moe"}
    cov = frame(at, "phase", "module_tree %")
    assert cov.set_index("phase").loc["prefill", "module_tree %"] == pytest.approx(prefill.coverage_pct["module_tree"])
    heat = figure(at, "layer_heatmap")["data"][0]
    assert len(heat["y"]) == 40 and "norm" in heat["x"]


OWN_GRAPH = REPO / "traces/h200/own-graph/vllm-own-graph-prefill4096-decode1.pt.trace.json.gz"


def test_graph_run_aligned_with_its_reference_shows_bracketed_coverage_and_layers(make_app, tmp_path):
    """A graph-mode breakdown written by ``phaseprof analyze --graph-reference --json``: the Breakdown page shows the
    coverage per method (graph alignment and bracketing included) and the 40 layers recovered from the reference."""
    from phaseprof.analysis.pipeline import analyze_trace
    from phaseprof.report.json_io import write_breakdown

    runs = tmp_path / "runs"
    runs.mkdir()
    bd = analyze_trace(OWN_GRAPH, graph_reference=OWN_EAGER)
    write_breakdown(bd, runs / "own-graph.breakdown.json")
    at = make_app("Breakdown", runs=runs)
    at.session_state["current_run"] = "own-graph.breakdown.json"
    at.session_state["bd_phase"] = "decode"
    ok(at.run())
    decode = next(p for p in bd.attribution.phases if p.phase == "decode")
    cov = frame(at, "phase", "bracketed %").set_index("phase")
    assert decode.coverage_pct["bracketed"] > 0 and decode.coverage_pct["graph_alignment"] > 0
    assert cov.loc["decode", "bracketed %"] == pytest.approx(decode.coverage_pct["bracketed"])
    assert cov.loc["decode", "graph_alignment %"] == pytest.approx(decode.coverage_pct["graph_alignment"])
    layers = frame(at, "layer", "type", "share %")
    assert layers["layer"].tolist() == [r.layer for r in decode.layers] == list(range(40))
