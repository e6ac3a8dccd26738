"""Every dashboard page under Streamlit's AppTest, on real traces: no exception, and the numbers shown are the
library's (the expected values are computed here with the same functions the CLI calls)."""

from __future__ import annotations

import re
import shutil

import pytest

from phaseprof.analysis.pipeline import analyze, analyze_trace
from phaseprof.analysis.digest import OTHER_STEPS_PART
from phaseprof.analysis.timeline import step_timeline
from phaseprof.analysis.verdict import verdicts_of
from phaseprof.classify.rules import load_rules
from phaseprof.report.json_io import load_breakdown
from phaseprof.report.markdown import breakdown_markdown
from phaseprof.trace.read import load_tables
from tests.conftest import REPO

from .conftest import (B200_PREFILL, DECODE_SWEEP_JSON, H100_DECODE, RUN_JSON, RUN_NAME, SWEEP_JSON, figure, frame,
                       ok, shown)


def test_runs_page_lists_everything_and_reads_run_json(make_app, runs_dir):
    at = ok(make_app("Runs").run())
    df = frame(at, "run", "GPU", "TTFT ms")
    expected = {p.name for p in runs_dir.glob("*.json.gz")} | {RUN_NAME}
    assert set(df["run"]) == expected
    run = df[df["run"] == RUN_NAME].iloc[0]
    assert run["kind"] == "run"
    assert (run["GPU"], run["model"], run["phase"], run["tokens"], run["mode"]) == (
        "NVIDIA H100 80GB HBM3", "llama-70b", "decode", 128, "graph")
    assert run["TTFT ms"] == RUN_JSON["timing"]["ttft"]["median_ms"]
    assert run["TPOT ms"] == RUN_JSON["timing"]["tpot"]["median_ms"]
    assert run["date"] == RUN_JSON["created_utc"]
    # Raw traces are analysed on request; then their GPU comes from the analysis.
    at.button(key="analyse_all").click().run()
    df = frame(at, "run", "GPU")
    gpu = dict(zip(df["run"], df["GPU"]))
    assert gpu[B200_PREFILL] == analyze_trace(runs_dir / B200_PREFILL).trace.gpu_name == "NVIDIA B200"
    assert not at.error  # failures: one collapsed box, one line per file
    (box,) = [e for e in at.expander if "could not be analysed" in e.label]
    assert box.label.startswith("1 of ")
    assert [shown(m.value) for m in box.markdown] == [f"- {analyze_error(runs_dir / 'broken.json.gz')}"]
    status = dict(zip(df["run"], df["status"]))
    assert not df.select_dtypes(exclude="number").isna().any().any()  # not known: empty, not "None"
    assert status["broken.json.gz"] == f"error: {analyze_error(runs_dir / 'broken.json.gz')}"
    assert status[B200_PREFILL] == "ok"
    # Drawn again after the analysis: nothing left to analyse, so no button (it still said 3 were not).
    assert not [b for b in at.button if b.key == "analyse_all"]
    # What bounds each phase, next to the timings (analysis.verdict).
    bound = dict(zip(df["run"], df["bound"]))
    v = verdicts_of(analyze_trace(runs_dir / B200_PREFILL)).phases
    assert bound[B200_PREFILL] == ", ".join(f"{x.phase} {x.bound}" for x in v) and v


def analyze_error(path):
    from phaseprof.errors import PhaseprofError

    with pytest.raises(PhaseprofError) as e:
        analyze_trace(path)
    return str(e.value)


def test_runs_page_filters_and_hands_runs_to_other_pages(make_app):
    at = ok(make_app("Runs").run())
    at.multiselect(key="filter_kind").set_value(["run"]).run()
    assert frame(ok(at), "run")["run"].tolist() == [RUN_NAME]
    at.session_state["current_run"] = B200_PREFILL
    at.button(key="use_a").click().run()
    at.session_state["current_run"] = H100_DECODE
    at.button(key="use_b").click().run()
    at.button(key="open_breakdown").click().run()
    assert ok(at).title[0].value == "Breakdown" and at.sidebar.radio(key="page").value == "Breakdown"
    assert any(H100_DECODE in shown(m.value) for m in at.markdown)
    at.sidebar.radio(key="page").set_value("Compare").run()
    # The heading names what differs ("A: NVIDIA H200 / B: NVIDIA H200" said nothing).
    assert shown(ok(at).subheader[0].value) == (
        "Comparing eager (inferred) · NVIDIA B200 (A) with graph (inferred) · NVIDIA H100 80GB HBM3 (B)")


@pytest.mark.parametrize("name", [H100_DECODE, "v100_tb_plugin_resnet50_2steps.json.gz",
                                  "mi300x_sglang_qwen3_8b_decode.json.gz"])
def test_breakdown_page_shows_the_library_numbers(make_app, runs_dir, name):
    at = make_app("Breakdown")
    at.session_state["current_run"] = name
    ok(at.run())
    bd = analyze_trace(runs_dir / name)
    phases = frame(at, "phase", "wall ms/step", "wall ms (total)")  # ms: per-step means first, then totals
    assert phases["wall ms/step"].tolist() == [p.per_step["wall_us"].mean / 1e3 for p in bd.phases]
    assert phases["GPU busy ms/step"].tolist() == [p.per_step["gpu_busy_us"].mean / 1e3 for p in bd.phases]
    assert phases["wall ms (total)"].tolist() == [p.wall_us / 1e3 for p in bd.phases]
    assert phases["launch overhead ms (total)"].tolist() == [p.idle.launch_overhead_us / 1e3 for p in bd.phases]
    steps = frame(at, "step", "launch calls", "allocations", "device mallocs")
    assert steps["wall ms"].tolist() == [r.wall_us / 1e3 for r in bd.steps]
    assert steps["GPU idle ms"].tolist() == [r.gpu_idle_us / 1e3 for r in bd.steps]
    assert steps["kernels"].tolist() == [r.kernels for r in bd.steps]
    assert steps["launch calls"].tolist() == [r.launches.total for r in bd.steps]
    assert steps["allocations"].tolist() == [r.memory.allocations for r in bd.steps]
    assert steps["device mallocs"].tolist() == [r.memory.device_mallocs for r in bd.steps]
    for api in {a for r in bd.steps for a in r.launches.by_api}:
        assert steps[api].tolist() == [r.launches.by_api.get(api, 0) for r in bd.steps]
    # What to look at first: the verdict of every phase, as `phaseprof analyze` prints it.
    lines = [v.line for v in verdicts_of(bd).phases]
    boxes = [shown(x.value) for x in at.main if x.type == "alert" or type(x).__name__ in ("Info", "Warning")]
    assert lines and [x for x in boxes if x in lines] == lines
    # Stacked bars: one trace per bucket, then per idle cause; lengths = ms per step (busy time only,
    # summed over steps, made a 5%-busy step look GPU-bound). A phase's bar is its mean step's wall time.
    bars = {t["name"]: t["x"] for t in figure(at, "phase_buckets")["data"]}
    for i, ph in enumerate(bd.phases):
        for b in ph.kernel_view:
            assert bars[b.bucket][i] == pytest.approx(b.time_us / 1e3 / ph.steps)
        assert bars["idle: host work"][i] == pytest.approx(ph.idle.host_work_us / 1e3 / ph.steps)
        assert sum(v[i] or 0 for v in bars.values()) == pytest.approx(ph.wall_us / 1e3 / ph.steps)
    shown_steps = [r for r in bd.steps if r.phase == at.selectbox(key="bd_phase").value]
    if len(shown_steps) > 1:
        per_step = {t["name"]: t["y"] for t in figure(at, "per_step")["data"]}
        assert per_step["launch calls"] == [r.launches.total for r in shown_steps]
    else:  # one step: no chart of single dots
        assert not [c for c in at.get("plotly_chart") if "per_step" in c.proto.id]
        assert any("no per-step chart" in c.value for c in at.caption)
    assert at.code[0].value == breakdown_markdown(bd).rstrip("\n")  # st.code drops the final newline
    if bd.unknown_kernels:
        unknown = frame(at, "unclassified kernel")
        assert unknown["unclassified kernel"].tolist() == [k.name for k in bd.unknown_kernels]
        assert unknown["ms (total)"].tolist() == [k.time_us / 1e3 for k in bd.unknown_kernels]
        assert any("matched no rule" in w.value for w in at.warning)
    # Module view switch: the bars follow the module view.
    at.radio(key="bd_view").set_value("module").run()
    bars = {t["name"]: t["x"] for t in figure(ok(at), "phase_buckets")["data"]}
    ph = bd.phases[0]
    assert {b.bucket: b.time_us / 1e3 / ph.steps for b in ph.module_view} == pytest.approx(
        {k: v[0] for k, v in bars.items() if v[0] is not None and not k.startswith("idle: ") and k != OTHER_STEPS_PART})


def test_breakdown_page_reads_a_run_directory(make_app, runs_dir):
    at = make_app("Breakdown")
    at.session_state["current_run"] = RUN_NAME
    ok(at.run())
    stored = load_breakdown(runs_dir / RUN_NAME / "breakdown.json")
    assert frame(at, "step", "launch calls")["launch calls"].tolist() == [r.launches.total for r in stored.steps]
    metrics = {m.label: shown(m.value) for m in at.metric}
    assert metrics == {"TTFT (clean, ms)": "41.50", "TPOT (clean, ms)": "29.75"}  # ms with 2 decimals everywhere
    line = shown(at.markdown[0].value)
    assert line.startswith(f"**{RUN_NAME}**") and line.endswith(" · llama-70b · graph · 128 prompt tokens")


def test_timeline_page_draws_the_step_the_library_cuts(make_app, runs_dir):
    at = make_app("Timeline", step="1")
    at.session_state["current_run"] = H100_DECODE
    ok(at.run())
    t = load_tables(runs_dir / H100_DECODE)
    analysed = analyze(t, ruleset=load_rules())
    bd, tl = analysed.breakdown, step_timeline(analysed.timeline, step=1)
    row = bd.steps[1]
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["wall ms"] == f"{row.wall_us / 1e3:,.2f}"  # ms with 2 decimals, as on every page
    assert metrics["idle: in launch calls ms"] == f"{row.idle.launch_overhead_us / 1e3:,.2f}"
    assert metrics["idle: queued / tail ms"] == f"{row.idle.other_us / 1e3:,.2f}"
    v = next(v for v in verdicts_of(bd).phases if v.phase == row.phase)
    assert v.line in [shown(x.value) for x in [*at.info, *at.warning]]  # the step's phase verdict first
    fig = figure(at, "timeline")
    kernels = sum(len(tr["y"]) for tr in fig["data"] if str(tr["y"][0]).startswith("stream"))
    assert kernels == len(tl.activities)
    idle = sum(len(tr["y"]) for tr in fig["data"] if tr["y"][0] == "GPU idle")
    assert idle == len(tl.idle)
    gaps = frame(at, "idle µs", "cause")
    assert gaps["idle µs"].max() == pytest.approx((tl.gaps["end_ns"] - tl.gaps["ts_ns"]).max() / 1e3)


def test_compare_page_is_the_cli_diff(make_app, runs_dir, capsys):
    from phaseprof.commands.main import main
    from phaseprof.report.diff import diff_breakdowns, load_side

    at = ok(make_app("Compare", a=H100_DECODE, b=B200_PREFILL).run())
    sa, sb = load_side(runs_dir / H100_DECODE), load_side(runs_dir / B200_PREFILL)
    d = diff_breakdowns(sa.breakdown, sb.breakdown, order_a=sa.order, order_b=sb.order,
                        labels=(H100_DECODE, B200_PREFILL))
    ph = d.phases[0]
    buckets = frame(at, "bucket", "A ms/step", "Δ share pp")
    assert buckets["bucket"].tolist() == [x.bucket for x in ph.kernel_view]
    assert buckets["A ms/step"].tolist() == pytest.approx([x.time_ms.a for x in ph.kernel_view])
    assert buckets["Δ share pp"].tolist() == pytest.approx([x.share.change for x in ph.kernel_view])
    bars = figure(at, "cmp_bars")["data"]
    assert bars[1]["y"] == pytest.approx([x.time_ms.b for x in ph.kernel_view])
    kernels = frame(at, "A kernel", "B kernel", "matched by")
    assert kernels["matched by"].tolist() == [m.how for m in ph.kernels]
    assert main(["diff", str(runs_dir / H100_DECODE), str(runs_dir / B200_PREFILL), "--format", "markdown"]) == 0
    assert at.code[0].value == capsys.readouterr().out.rstrip("\n")
    text = shown(" ".join(m.value for m in at.markdown) + " ".join(h.value for h in at.subheader))
    assert "NVIDIA H100 80GB HBM3" in text and "NVIDIA B200" in text


@pytest.mark.public
def test_compare_page_says_what_it_compares_on_the_public_h100_and_b200_traces(make_app, public_dir):
    from .conftest import PUBLIC_B200, PUBLIC_H100

    at = ok(make_app("Compare", runs=public_dir, a=PUBLIC_H100, b=PUBLIC_B200).run())
    assert re.fullmatch(r"Comparing (.+ · )?NVIDIA H100 80GB HBM3 \(A\) with (.+ · )?NVIDIA B200 \(B\)",
                        shown(at.subheader[0].value))
    md = shown(" ".join(m.value for m in at.markdown))
    assert "LlamaForCausalLM" in md and "gpt-oss-120b" in md  # what each trace is (MANIFEST.tsv)
    warnings = shown(" ".join(w.value for w in at.warning))
    assert "different workloads" in warnings and "GPU differs" in warnings
    assert "model" in " ".join(i.value for i in at.info)  # models not recorded in the traces: said so


def test_sweep_page_plots_the_stored_points(make_app):
    at = ok(make_app("Sweep").run())
    fig = figure(at, "sweep_chart")
    line = next(t for t in fig["data"] if t.get("mode") == "lines+markers")
    assert line["x"] == [p["prompt_tokens"] for p in SWEEP_JSON["points"]]
    assert line["y"] == [p["ttft"]["median_ms"] for p in SWEEP_JSON["points"]]
    assert frame(at, "sweep", "p90")["p90"].tolist() == [p["ttft"]["p90_ms"] for p in SWEEP_JSON["points"]]
    assert any("17.50 µs per prompt token" in shown(c.value) for c in at.caption)
    at.radio(key="sweep_phase").set_value("decode").run()
    table = frame(ok(at), "sweep", "TPOT ms (median)")
    assert table["TPOT ms (median)"].tolist() == [p["tpot"]["median_ms"] for p in DECODE_SWEEP_JSON["points"]]
    assert table["output tok/s (median)"].tolist() == [p["output_tok_per_s"]["median"]
                                                       for p in DECODE_SWEEP_JSON["points"]]


def test_sweep_legend_names_the_sweeps_by_what_tells_them_apart(make_app, tmp_path):
    """The committed H200 prefill sweeps, eager and graph: the legend says "eager" and "graph", not two run paths
    of 80 characters (the legend took two thirds of the chart's width); the caption maps them back."""
    runs = tmp_path / "runs"
    found = {}
    for mode in ("eager", "graph"):
        (d,) = (REPO / "traces" / "h200" / mode).glob("*-sweep-prefill-128-8192")
        shutil.copytree(d, runs / mode / d.name)
        found[mode] = f"{mode}/{d.name}"
    at = ok(make_app("Sweep", runs=runs).run())
    names = [t["name"] for t in figure(at, "sweep_chart")["data"] if t.get("showlegend") is not False]
    assert names == ["eager", "graph"]
    legend = next(shown(c.value) for c in at.caption if c.value.startswith("Legend"))
    assert all(f"{m} = {path} (" in legend for m, path in found.items()), legend
    assert frame(at, "sweep", "p90")["sweep"].unique().tolist() == ["eager", "graph"]
    # Eager's least-squares slope is negative (-1.47 µs per token): never stated as a cost per token
    slope = next(shown(c.value) for c in at.caption if c.value.startswith("TTFT slope"))
    assert "eager: no meaningful fit: TTFT does not grow with the prompt length" in slope
    assert "graph: 12.19 µs per prompt token (least squares)" in slope
    assert "-1.47 µs per prompt token" not in slope


def test_pareto_page_offers_the_profiled_runs_the_cli_matches_from_the_traces_root(make_app):
    """With the dashboard opened on traces/ (the committed tree: profiled runs 5 folders deep), the
    Pareto page found the sweeps but offered "No options to select" for the runs `pareto --profiled` matches."""
    at = ok(make_app("Pareto", runs=REPO / "traces").run())
    runs = at.multiselect(key="pareto_profiled")
    want = [f"h200/serving/{q}/profiled/c{c}" for q in ("bf16", "fp8") for c in (1, 16, 256)]
    assert runs.options == want and runs.value == want


def test_memory_page_mounts(make_app):
    at = ok(make_app("Memory").run())
    assert at.sidebar.radio(key="page").value == "Memory"
    assert len(at.main.children) > 0


def test_a_trace_is_parsed_once_with_progress_then_served_from_cache(make_app, runs_dir, tmp_path, monkeypatch):
    import gzip

    import phaseprof.trace.read as tables

    runs = tmp_path / "fresh"
    runs.mkdir()
    raw = gzip.decompress((runs_dir / B200_PREFILL).read_bytes())
    (runs / "fresh.json.gz").write_bytes(gzip.compress(raw, mtime=1))  # new content hash: not cached yet
    calls = []
    real = tables.load_tables
    monkeypatch.setattr(tables, "load_tables", lambda p: calls.append(p) or real(p))
    at = make_app("Breakdown", runs=runs)
    ok(at.run())
    progress = [m.value for m in at.markdown if "decoding the trace" in m.value]
    assert progress and len(calls) == 1
    for view in ("module", "kernel"):  # interactions: no re-parse, no progress box
        at.radio(key="bd_view").set_value(view).run()
        assert not [m.value for m in ok(at).markdown if "decoding the trace" in m.value]
    at.sidebar.radio(key="page").set_value("Timeline").run()
    at.sidebar.radio(key="page").set_value("Compare").run()
    ok(at)
    assert len(calls) == 1


def test_ranks_page_shows_the_real_tp2_capture_side_by_side(make_app, tmp_path):
    """The two H200 rank traces of traces/h200x2, as `phaseprof analyze DIR` reports them."""
    from phaseprof.scale.ranks import analyze_ranks, find_trace_files
    from phaseprof.scale.waits import rank_verdicts

    src = REPO / "traces/h200x2/tp2-eager-prefill4096-decode8"
    runs = tmp_path / "runs"
    shutil.copytree(src, runs / "tp2")
    at = ok(make_app("Ranks", runs=runs).run())
    want = analyze_ranks(find_trace_files(runs / "tp2"))
    table = frame(at, "rank", "communication %")
    assert table["rank"].tolist() == [0, 1]
    assert table["communication %"].round(6).tolist() == [round(want.communication_share_pct[r], 6) for r in (0, 1)]
    assert table["GPU busy ms"].round(6).tolist() == [round(want.ranks[r].totals["gpu_busy_us"] / 1e3, 6)
                                                      for r in (0, 1)]
    spread = frame(at, "step", "slowest rank", "spread ms")
    assert spread["slowest rank"].tolist() == [s.slowest_rank for s in want.steps]
    # Explained ("slowest rank 0" next to rank 1 at 96% communication, unexplained): what each rank's
    # phases are bound by, who waited for whom in the collectives, and how to read the two.
    lines = [shown(i.value) for i in at.info]
    c = want.collectives
    # A rank that mostly waits says on whom first; its phases' own verdicts follow, but not a
    # "GPU-bound — communication" one, which is that wait
    waiting = rank_verdicts(c, {r: bd.totals["gpu_busy_us"] for r, bd in want.ranks.items()})
    assert list(waiting) == [0] and waiting[0].startswith("waiting on rank 1 — 59% of its GPU busy")
    assert lines == [f"rank {r} · {x}" for r, bd in want.ranks.items()
                     for x in ([waiting[r]] if r in waiting else [])
                     + [v.line for v in verdicts_of(bd).phases if r not in waiting or v.top_bucket != "communication"]]
    assert any("how the waits add up" in m.value.lower() for m in at.markdown)
    waits = frame(at, "rank", "waited ms", "late by ms")
    assert waits["waited ms"].tolist() == [c.wait_us_by_rank[r] / 1e3 for r in (0, 1)]
    assert waits["why late"].tolist() == [c.cause_by_rank[r].main for r in (0, 1)]
    assert any("waiting for it" in x.value for x in at.caption)


def test_compare_opens_on_a_like_for_like_pair_named_by_what_differs(make_app, tmp_path):
    """Committed H200 captures (eager and graph, prefill and decode): Compare opens on the eager and graph runs
    of one workload, not the first two listed, and its legend says eager / graph, not the GPU twice."""
    h200 = REPO / "traces" / "h200"
    runs = tmp_path / "runs"
    for mode in ("eager", "graph"):
        for d in sorted((h200 / mode).glob("*-prefill-4096")) + sorted((h200 / mode).glob("*-decode-128in-32out")):
            (runs / mode / d.name).mkdir(parents=True)
            for f in ("breakdown.json", "run.json"):
                shutil.copy(d / f, runs / mode / d.name / f)
    at = ok(make_app("Compare", runs=runs).run())
    a, b = at.session_state["cmp_a"], at.session_state["cmp_b"]
    assert (a.split("/")[0], b.split("/")[0]) == ("eager", "graph") and a.endswith("prefill-4096") \
        and b.endswith("prefill-4096"), (a, b)
    # the committed breakdowns are the current analysis: the graph prefill's module view is now placed
    # structurally (no op stack in a graph replay), and the page says so
    # both module views now rest on the layer plan (eager steps without module scopes are cut into
    # layers too), so only the mode differs
    assert [shown(w.value) for w in at.warning if "like for like" in w.value] == [
        "Not like for like: mode differs: eager (A) vs graph (B)."]
    # Each side's verdicts open the page, named by what differs.
    verdicts = [shown(x.value) for x in at.markdown if "What to look at first" in x.value]
    assert verdicts == ["**What to look at first, A: eager**", "**What to look at first, B: graph**"]
    names = [t["name"] for t in figure(at, "cmp_bars")["data"]]
    assert names == ["A: eager", "B: graph"], names
