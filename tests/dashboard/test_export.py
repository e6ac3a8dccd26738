"""The Timeline's zoom and its one-step export: the exported file is the step, as phaseprof and HTA read it."""

from __future__ import annotations

import gzip
import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from phaseprof.analysis.pipeline import analyze, analyze_trace
from phaseprof.analysis.step_export import export_name, export_step, export_window_ns
from phaseprof.analysis.timeline import step_timeline
from phaseprof.classify.rules import load_rules
from phaseprof.errors import PhaseprofError
from phaseprof.trace.read import load_tables
from tests.conftest import PUBLIC_CUT_DIR, REPO

from .conftest import H100_DECODE, figure, ok

#: A real eager decode run on the H200 (2,441 kernels per step): a "wall of hairlines" when drawn whole.
H200_EAGER_DECODE = REPO / "traces/h200/eager/20261130T094747Z-h200-qwen3.5-35b-a3b-decode-128in-32out/trace.json.gz"
#: The tiny CPU capture (CPU ops only, no GPU activity).
CPU_RUN = REPO / "traces/cpu/tiny-hybrid-prefill128-decode8/trace.json.gz"


def _export(path: Path, step: int, tmp_path: Path, window_us=None):
    tables = load_tables(path)
    index = analyze(tables, ruleset=load_rules()).timeline
    ex = export_step(path, index, step, window_us=window_us)
    out = tmp_path / ex.file_name
    out.write_bytes(ex.data)
    return ex, out, index


@pytest.mark.parametrize("path, step", [(PUBLIC_CUT_DIR / H100_DECODE, 1), (H200_EAGER_DECODE, 2), (CPU_RUN, 2)],
                         ids=["h100-decode", "h200-eager-decode", "cpu"])
def test_an_exported_step_is_that_step_for_phaseprof(path, step, tmp_path):
    src = analyze_trace(path)
    ex, out, _ = _export(path, step, tmp_path)
    assert out.name == export_name(path, step) and out.name.endswith(f"-step{step}.pt.trace.json.gz")
    # A Kineto JSON subset: the source's own top-level keys, and only events the source has, unchanged.
    doc = json.loads(gzip.decompress(ex.data))
    source = json.loads(gzip.decompress(path.read_bytes()))
    assert set(doc) == set(source)
    assert {k: v for k, v in doc.items() if k != "traceEvents"} == {k: v for k, v in source.items()
                                                                     if k != "traceEvents"}
    originals = {json.dumps(e, sort_keys=True) for e in source["traceEvents"]}
    assert all(json.dumps(e, sort_keys=True) in originals for e in doc["traceEvents"])
    assert ex.stats.events_out == len(doc["traceEvents"]) < ex.stats.events_in
    # Re-analysed, the file holds that step: same phase, same kernels, same GPU busy time.
    mine = analyze_trace(out)
    row = src.steps[step]
    assert [s.phase for s in mine.steps] == [row.phase]
    (got,) = mine.steps
    assert (got.kernels, got.memcpy_count, got.launches.total) == (row.kernels, row.memcpy_count, row.launches.total)
    assert got.gpu_busy_us == pytest.approx(row.gpu_busy_us, abs=1e-3)
    assert out.stat().st_size < path.stat().st_size


def test_a_zoom_window_exports_only_the_work_launched_in_it(tmp_path):
    path = H200_EAGER_DECODE
    full, _, index = _export(path, 2, tmp_path)
    tl = step_timeline(index, step=2)
    wall_us = tl.wall_ns / 1e3
    window = (0.25 * wall_us, 0.5 * wall_us)
    lo, hi = export_window_ns(index, 2, window)
    assert (lo, hi) == (tl.start_ns + round(window[0] * 1e3), tl.start_ns + round(window[1] * 1e3))
    part, out, _ = _export(path, 2, tmp_path, window_us=window)
    assert "-step2-" in out.name and out.name.endswith("us.pt.trace.json.gz")
    assert 0 < part.stats.kernels_out < full.stats.kernels_out
    # Exactly the GPU activities whose launch call starts in the window (the Timeline's own launch times).
    rt = index.tables.runtime
    items = index.items[index.items["step"] == 2]
    launch_ts = rt["ts_ns"].to_numpy()[items["launch"].to_numpy()]
    kernels = items["kind"].astype(str).to_numpy() == "kernel"
    assert part.stats.kernels_out == int((kernels & (launch_ts >= lo) & (launch_ts < hi)).sum())
    for bad in ((10.0, 10.0), (wall_us + 10, wall_us + 20)):
        with pytest.raises(PhaseprofError):
            export_window_ns(index, 2, bad)


@pytest.mark.skipif(importlib.util.find_spec("hta") is None, reason="HolisticTraceAnalysis not installed "
                    "(the 'hta' extra; scripts/install.sh installs it)")
@pytest.mark.parametrize("path, step", [(PUBLIC_CUT_DIR / H100_DECODE, 1), (H200_EAGER_DECODE, 2)],
                         ids=["h100-decode", "h200-eager-decode"])
def test_an_exported_step_opens_in_hta(path, step, tmp_path):
    from phaseprof.analysis.hta_check import cross_check_hta

    _, out, _ = _export(path, step, tmp_path)
    mine = analyze_trace(out)
    check = cross_check_hta(out, mine)  # HTA's TraceAnalysis on a directory holding the exported file
    assert check.problem is None, check.problem
    assert check.kernels.hta_count == check.kernels.phaseprof_count == mine.steps[0].kernels
    assert check.agree


def test_timeline_page_zooms_and_offers_the_export(make_app, runs_dir):
    at = make_app("Timeline", step="1")
    at.session_state["current_run"] = H100_DECODE
    ok(at.run())
    tl = step_timeline(analyze(load_tables(runs_dir / H100_DECODE), ruleset=load_rules()).timeline, step=1)
    whole = figure(at, "timeline")
    assert "range" not in whole["layout"]["xaxis"] or whole["layout"]["xaxis"].get("autorange") is not False
    (button,) = [b for b in at.get("download_button") if "tl_export" in b.proto.id]
    assert button.proto.label == "Export step 1 as a trace file"
    wall_us = tl.wall_ns / 1e3
    window = (100.0, 600.0)
    at.slider(key="tl_zoom_1").set_value(window).run()
    ok(at)
    fig = figure(at, "timeline")
    assert fig["layout"]["xaxis"]["range"] == list(window)
    # Only what overlaps the window is drawn.
    lo, hi = tl.start_ns + 100_000, tl.start_ns + 600_000
    a = tl.activities
    expected = int(((a["ts_ns"] < hi) & (a["end_ns"] > lo)).sum())
    drawn = sum(len(tr["y"]) for tr in fig["data"] if str(tr["y"][0]).startswith("stream"))
    assert drawn == expected < len(a)
    (button,) = [b for b in at.get("download_button") if "tl_export" in b.proto.id]
    assert button.proto.label == "Export µs 100 to 600 of step 1 as a trace file"
    assert wall_us > 600


def test_a_run_directory_export_is_named_by_the_run(tmp_path):
    run = tmp_path / "20261130T1200Z-h100-decode"
    run.mkdir()
    shutil.copy(PUBLIC_CUT_DIR / H100_DECODE, run / "trace.json.gz")
    assert export_name(run / "trace.json.gz", 0) == "20261130T1200Z-h100-decode-trace-step0.pt.trace.json.gz"
    assert export_name("x/rank0.pt.trace.json.gz", 2, (1.4, 20.6)) == "x-rank0-step2-1-21us.pt.trace.json.gz"


def test_a_link_opens_a_zoom_window(make_app):
    at = make_app("Timeline", step="1", zoom="100:600")
    at.session_state["current_run"] = H100_DECODE
    ok(at.run())
    assert figure(at, "timeline")["layout"]["xaxis"]["range"] == [100.0, 600.0]
    for bad in ("600:100", "x:y", "-5"):
        at = make_app("Timeline", step="1", zoom=bad)
        at.session_state["current_run"] = H100_DECODE
        ok(at.run())
        assert "range" not in figure(at, "timeline")["layout"]["xaxis"]
