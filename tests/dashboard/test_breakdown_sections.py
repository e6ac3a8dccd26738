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

from .conftest import figure, frame, ok, shown

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
    points = {t["name"]: t for t in fig["data"] if t["mode"] == "markers"}
    # One point per bucket that did FLOPs, named in the legend and coloured by bucket as in every other chart
    # (all grey, labels overlapping, FLOP-less buckets pulling the axis down to 10µ TFLOP/s).
    with_flops = [b for b in expected if b.flops > 0 and b.time_us > 0]
    assert sorted(points) == sorted(b.bucket for b in with_flops) and "moe" in points
    for b in with_flops:
        assert points[b.bucket]["marker"]["color"] == BUCKET_COLORS[b.bucket]
        assert points[b.bucket]["y"] == [pytest.approx(b.achieved_tflops)]
    assert 10 ** fig["layout"]["yaxis"]["range"][0] <= min(b.achieved_tflops for b in with_flops)
    assert 10 ** fig["layout"]["yaxis"]["range"][0] >= sol.ceiling.tflops / 1e3
    # A bucket faster than its floor is ringed and explained; here none is.
    assert not any(b.beats_floor for b in expected)
    assert not [t for t in fig["data"] if "faster than its floor" in t["name"]]


def _breakdown_with_ceilings(make_app, tmp_path, run):
    """The Breakdown page of a copy of ``run`` beside the measured H200 ceilings, run; and its SOL section."""
    runs = tmp_path / "runs"
    shutil.copytree(run, runs / run.name)
    (runs / "ceilings").mkdir()
    shutil.copy(CEILINGS, runs / "ceilings")
    at = make_app("Breakdown", runs=runs)
    at.session_state["current_run"] = run.name
    ok(at.run())
    return at, attach_sol(load_breakdown(runs / run.name / "breakdown.json"), source=runs / run.name).sol


def test_a_point_faster_than_its_floor_is_flagged(make_app, tmp_path):
    """The eager decode capture's prefill MoE ran at 111% of light (uniform routing assumed): ringed on the
    roofline and explained under it (a prefill MoE point drawn above the roof, unflagged)."""
    at, sol = _breakdown_with_ceilings(make_app, tmp_path,
                                       REPO / "traces/h200/eager/20261130T094747Z-h200-qwen3.5-35b-a3b-decode-128in-32out")
    beats = [(ph.phase, b) for ph in sol.phases for b in ph.buckets if b.beats_floor]
    assert [(p, b.bucket) for p, b in beats] == [("prefill", "moe")]
    ring = next(t for t in figure(at, "roofline")["data"] if "faster than its floor" in t["name"])
    assert ring["y"] == [pytest.approx(beats[0][1].achieved_tflops)]
    assert any("prefill: moe ran faster than its floor" in w.value and beats[0][1].beats_floor[:20] in w.value
               for w in at.warning)



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
    fig = figure(at, "layer_heatmap")
    heat = fig["data"][0]
    assert len(heat["y"]) == 40 and "norm" in heat["x"]
    # Every layer labelled (only even rows were, the attention layers 3, 7, ... were not).
    assert fig["layout"]["yaxis"]["tickvals"] == heat["y"] == fig["layout"]["yaxis"]["ticktext"]
    assert "3 attention+moe" in heat["y"] and "7 attention+moe" in heat["y"]


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


def test_measured_routing_heat_map(make_app, tmp_path):
    """A capture with its MoE routing recorded (the H200 c = 64 decode batch, routing.npz): the Breakdown page
    draws phases x MoE layers, each cell the SOL section's hottest-expert load over the balanced load."""
    at, sol = _breakdown_with_ceilings(make_app, tmp_path,
                                       REPO / "traces/h200/routing/qwen3.5-35b-a3b-decode-128in-32out-c64")
    assert sol.routing == "measured (routing.npz)" and len(sol.moe_layers) == 3 * 40  # prefill, mixed, decode
    (heat,) = figure(at, "routing_heatmap")["data"]
    assert heat["y"] == ["prefill", "mixed", "decode"] and heat["x"] == list(range(40))
    decode = {r.layer: r.max_over_mean for r in sol.moe_layers if r.phase == "decode"}
    assert heat["z"][2] == pytest.approx([decode[i] for i in range(40)])
    assert all(v > 1 for v in heat["z"][2])  # 64 tokens x top-8 over 256 experts: never perfectly balanced


def test_a_cpu_run_is_shown_in_cpu_words(make_app, tmp_path):
    """The page opened on the committed CPU run in GPU words ("GPU busy", "launch overhead 0.00") and
    said "not for CPU-only traces ()"."""
    cpu = REPO / "traces/cpu/tiny-hybrid-prefill128-decode8"
    runs = tmp_path / "runs"
    shutil.copytree(cpu, runs / cpu.name)
    at = make_app("Breakdown", runs=runs)
    at.session_state["current_run"] = cpu.name
    ok(at.run())
    phases = frame(at, "phase", "CPU op time ms/step")
    steps = frame(at, "step", "CPU op time ms")
    for df in (phases, steps):
        assert not [c for c in df.columns if "GPU" in c or "launch" in c or "kernels" in c], list(df.columns)
    assert "ops" in steps.columns
    captions = [shown(c.value) for c in at.caption]
    assert any(c.startswith("no speed-of-light numbers: not for CPU-only traces") for c in captions)
    assert not any("()" in c for c in captions)
