"""The Pareto page on the committed H200 serving sweeps (``traces/h200/serving``: bf16 and fp8 servers of the
35B-A3B preset, profiled at c = 1, 16, 256; measured ceilings in ``traces/h200/ceilings``).

The chart and the tables show ``pareto.build``'s report for the same inputs, point for point; the profiled points
open their runs on the Breakdown page; a capacity wall's points are flagged; hostile names stay text; and in
Chromium the page draws without console errors, a click on a profiled point opens its breakdown, and its
screenshot is docs/img/pareto.png (written with ``PHASEPROF_UPDATE_DOCS_IMG=1``).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from phaseprof.dashboard import frontier
from phaseprof.pareto.build import build_report, match_profiled, read_sweeps
from tests.conftest import REPO

from . import hostile_runs as H
from .conftest import figure, frame, ok

H200 = (REPO / "traces" / "h200").resolve()
SERVING = H200 / "serving"
CEILINGS = None  # the GPU's one baseline, as `pareto` without --ceilings (phaseprof/sol/measured/h200.json)
SWEEPS = [SERVING / q / "decode" for q in ("bf16", "fp8")]
PROFILED = [SERVING / q / "profiled" / f"c{c}" for q in ("bf16", "fp8") for c in (1, 16, 256)]
DOCS_IMG = REPO / "docs" / "img" / "pareto.png"


def _library_report(sweeps=SWEEPS, profiled=PROFILED, ceilings=CEILINGS):
    read, labels = read_sweeps(sweeps)
    return build_report(read, labels, sweeps, ceilings=ceilings, profiled=match_profiled(read, profiled))


def _config_traces(fig: dict) -> list[dict]:
    return [t for t in fig["data"] if t.get("mode") == "lines+markers+text"]


def _trace(fig: dict, name: str) -> dict:
    return next(t for t in fig["data"] if t.get("name") == name)


@pytest.fixture(scope="module")
def report():
    return _library_report()


def test_chart_and_frontier_table_are_build_reports(make_app, report) -> None:
    at = ok(make_app("Pareto", runs=H200).run())
    assert [m.value for m in at.multiselect][:2] == [["serving/bf16/decode", "serving/fp8/decode"],
                                                     [f"serving/{q}/profiled/c{c}" for q in ("bf16", "fp8")
                                                      for c in (1, 16, 256)]]
    assert at.selectbox(key="pareto_ceilings").value == frontier.AUTO  # as `pareto` without --ceilings
    assert {(c.ceiling, c.gpu) for c in report.configs} == {("NVIDIA H200 (measured)", "NVIDIA H200")}
    fig = figure(at, "pareto_chart")
    traces = _config_traces(fig)
    assert [t["name"] for t in traces] == ["bf16", "fp8"]  # the words both labels share dropped
    shown = set()
    for t in traces:
        for x, y, i in zip(t["x"], t["y"], t["customdata"]):
            p = report.points[i]
            assert (x, y) == (p.tps_per_user, p.tps_per_gpu)
            shown.add((p.config, p.concurrency))
            hover = t["hovertext"][t["customdata"].index(i)]
            assert f"c = {p.concurrency}" in hover and f"TPOT p50 {p.tpot_p50_ms:,.2f} ms" in hover
            assert f"TTFT p50 {p.ttft_p50_ms:,.2f} ms" in hover
            assert ("click to open" in hover) == (p.breakdown is not None)
        assert t["marker"]["symbol"] == ["diamond" if report.points[i].breakdown else "circle"
                                         for i in t["customdata"]]
    assert shown == {(p.config, p.concurrency) for p in report.points} and len(shown) == 10
    front = _trace(fig, "frontier")
    assert list(zip(front["x"], front["y"])) == [(f.tps_per_user, f.tps_per_gpu) for f in report.frontier]
    sol = [t for t in fig["data"] if str(t.get("name", "")).endswith("speed of light")]
    assert sorted((x, y) for t in sol for x, y in zip(t["x"], t["y"])) == sorted(
        (p.sol.tps_per_user, p.sol.tps_per_gpu) for p in report.points)
    # the servers' walls (max_num_seqs 256, the KV cache holds more) are not crossed by c <= 256
    assert all(c.capacity is not None and c.capacity.max_concurrency == 256 for c in report.configs)
    assert "over the capacity wall" not in [t.get("name") for t in fig["data"]]
    table = frame(at, "config", "c", "tok/s/GPU", "breakdown")
    assert table["c"].tolist() == [f.concurrency for f in report.frontier] == [256, 256, 64, 16, 4, 1]
    assert table["config"].tolist() == ["bf16", "fp8", "fp8", "fp8", "fp8", "bf16"]
    assert table["tok/s/GPU"].tolist() == [f.tps_per_gpu for f in report.frontier]
    by = {(p.config, p.concurrency): p for p in report.points}
    assert table["TPOT ms"].tolist() == [by[(f.config, f.concurrency)].tpot_p50_ms for f in report.frontier]
    assert table["breakdown"].fillna("").tolist()[:3] == ["?page=Breakdown&run=serving/bf16/profiled/c256",
                                                          "?page=Breakdown&run=serving/fp8/profiled/c256", ""]
    assert table["over capacity"].tolist() == [""] * 6  # a wall, no point over it
    # and the committed `phaseprof pareto` output of the same inputs (traces/h200/serving/pareto.json)
    committed = json.loads((SERVING / "pareto.json").read_text())
    assert [(f["config"], f["concurrency"], f["tps_per_gpu"]) for f in committed["frontier"]] == [
        (f.config, f.concurrency, f.tps_per_gpu) for f in report.frontier]


def test_a_profiled_point_opens_in_breakdown(make_app) -> None:
    at = ok(make_app("Pareto", runs=H200).run())
    sel = at.selectbox(key="pareto_point")
    sel.set_value(next(o for o in sel.options if o.startswith("fp8 c=16"))).run()
    at.button(key="pareto_open").click().run()
    ok(at)
    assert at.session_state["page"] == "Breakdown"
    assert at.session_state["current_run"] == "serving/fp8/profiled/c16"


def test_datasheet_ceilings_and_no_profiled_runs(make_app) -> None:
    at = make_app("Pareto", runs=H200, ceilings="spec", sweep="serving/fp8/decode")  # a link's preselection
    ok(at.run())
    assert at.multiselect[0].value == ["serving/fp8/decode"]
    at.multiselect(key="pareto_profiled").set_value([]).run()
    fig = figure(ok(at), "pareto_chart")
    report = _library_report(sweeps=SWEEPS[1:], profiled=[], ceilings="spec")
    for t in _config_traces(fig):
        assert [report.points[i].tps_per_gpu for i in t["customdata"]] == t["y"]
        assert set(t["marker"]["symbol"]) == {"circle"}
    # the server sweeps name a URL as their device and the GPU their profiled runs' traces name: the datasheet's
    assert any(str(t.get("name", "")).endswith("speed of light") for t in fig["data"])
    assert {c.ceiling for c in report.configs} == {"H200 (spec)"}


def test_points_over_the_capacity_wall_are_flagged(make_app, tmp_path: Path) -> None:
    """The bf16 sweep with a KV cache of 2 GiB written into its record (an edited copy, so the memory plan has
    a size to build the wall from): the points above the wall are crossed, exactly the report's."""
    d = tmp_path / "runs" / "bf16-2gib" / "decode"
    d.mkdir(parents=True)
    doc = json.loads((SERVING / "bf16/decode/sweep.json").read_text())
    doc["vllm_startup_facts"] = {"reserved_kv_cache_gib": 2.0}
    (d / "sweep.json").write_text(json.dumps(doc))
    at = ok(make_app("Pareto", runs=tmp_path / "runs").run())
    report = _library_report(sweeps=[d], profiled=[], ceilings="spec")
    over = [p for p in report.points if p.over_capacity]
    assert over and len(over) < len(report.points)
    cross = _trace(figure(at, "pareto_chart"), "over the capacity wall")
    assert list(zip(cross["x"], cross["y"])) == [(p.tps_per_user, p.tps_per_gpu) for p in over]
    assert frame(at, "config", "over capacity")["over capacity"].tolist() == [
        "yes" if p.over_capacity else "" for p in (next(q for q in report.points if q.concurrency == f.concurrency)
                                                   for f in report.frontier)]
    configs = frame(at, "max concurrency")
    assert configs["max concurrency"].tolist() == [report.configs[0].capacity.max_concurrency]


def test_without_serving_sweeps_the_page_says_what_to_run(make_app) -> None:
    at = ok(make_app("Pareto").run())  # the shared runs directory: a decode sweep from before serving metrics
    assert "No decode sweep with serving metrics" in at.info[0].value and not at.get("plotly_chart")


def test_short_labels() -> None:
    assert frontier.short_labels(["m graph bf16 1gpu async", "m graph fp8 1gpu async"]) == {
        "m graph bf16 1gpu async": "bf16", "m graph fp8 1gpu async": "fp8"}
    assert frontier.short_labels(["m graph bf16"]) == {"m graph bf16": "m graph bf16"}
    assert frontier.short_labels(["a b", "b a"]) == {"a b": "a b", "b a": "b a"}  # nothing told apart: whole


def test_hostile_names_stay_text(make_app, tmp_path: Path) -> None:
    """A sweep and a profiled run whose model name, sweep directory and run directory are the payload: the
    page's figure and markdown carry it as text only (the walk of tests/dashboard/test_live_markup.py)."""
    from .test_live_markup import _walk

    runs = tmp_path / "runs"
    name = "x" + H.PAYLOAD.replace("/", "∕")[:200]  # a directory name: no slash
    for q in ("bf16", "fp8"):
        shutil.copytree(SERVING / q / "decode", runs / f"{name}-{q}" / "decode")
        shutil.copytree(SERVING / q / "profiled" / "c16", runs / f"{name}-{q}" / "profiled" / "c16")
        for f, key in ((runs / f"{name}-{q}" / "decode" / "sweep.json", "model"),
                       (runs / f"{name}-{q}" / "profiled" / "c16" / "run.json", "model")):
            doc = json.loads(f.read_text())
            doc[key]["name"] = H.PAYLOAD
            f.write_text(json.dumps(doc))
    at = make_app("Pareto", runs=runs)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    figures, texts = _walk(at, "Pareto")
    assert figures and texts


# ---------------------------------------------------------------------------------------------------- browser
@pytest.mark.browser
def test_pareto_in_chromium(tmp_path: Path) -> None:
    from .test_browser import page_on

    with page_on(H200, tmp_path, height=1900) as (page, url, errors):
        page.goto(f"{url}/?page=Pareto")
        page.get_by_text("Download pareto JSON").first.wait_for(timeout=120_000)
        page.wait_for_function("!document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=120_000)
        page.wait_for_function("document.querySelector('[data-testid=\"stPlotlyChart\"] .js-plotly-plot "
                               ".main-svg')", timeout=60_000)
        page.wait_for_timeout(800)
        svg = page.evaluate("Array.from(document.querySelectorAll('.js-plotly-plot')).map(e => e.textContent)"
                            ".join(' ')")
        assert "tokens/s per user" in svg and "frontier" in svg and "bf16" in svg and "fp8" in svg
        text = page.locator('[data-testid="stMain"]').inner_text()
        assert "Traceback" not in text and "internal error" not in text
        shot = tmp_path / "pareto.png"
        page.locator('[data-testid="stMain"]').screenshot(path=str(shot))  # no sidebar (a local path)
        assert shot.stat().st_size <= 250_000
        if os.environ.get("PHASEPROF_UPDATE_DOCS_IMG"):
            shutil.copy(shot, DOCS_IMG)
        # hover the fp8 c=16 point (profiled) and click it: its breakdown opens
        # traces: bf16, its floors (segments, markers), fp8 (c = 1, 4, 16, ...)
        fp8 = page.locator(".scatterlayer .trace").nth(3).locator("path.point").nth(2)
        box = fp8.bounding_box()
        assert box is not None
        page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        page.wait_for_timeout(500)
        hover = page.locator(".hoverlayer").first.text_content() or ""
        assert "fp8" in hover and "c = 16" in hover and "serving/fp8/profiled/c16" in hover, hover
        page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        page.get_by_text("Download breakdown JSON").first.wait_for(timeout=120_000)
        page.wait_for_function("!document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=120_000)
        assert "serving/fp8/profiled/c16" in page.locator('[data-testid="stMain"]').inner_text()
        assert not errors, errors[:10]
