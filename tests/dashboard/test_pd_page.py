"""The PD page on the committed H200 disaggregated runs (``traces/h200/pd``: 4,096 and 1,024 prompt tokens, and
4,096 with UCX_TLS set; run.json of kind ``pd``, handoff.json, prefill/ and decode/breakdown.json, no traces;
the UCX_TLS run kept no breakdowns).

The page shows the ``PdRun`` that ``disagg.run.read_pd_run`` returns and nothing of its own: the summary is
``summary_lines``, the timeline's segments the ``ProfiledTimeline`` fields, the table ``handoff.requests``, each
side's chart the Breakdown page's chart of that side's breakdown; a missing side is one line; hostile names stay
text; the Runs and Breakdown pages send PD runs here; in Chromium the page draws without console errors, and its
screenshot is docs/img/pd.png (written with ``PHASEPROF_UPDATE_DOCS_IMG=1``).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from phaseprof.disagg.render import summary_lines, timeline_cents, timeline_lines
from phaseprof.disagg.run import read_pd_run
from tests.conftest import REPO

from . import hostile_runs as H
from .conftest import figure, frame, ok, shown

H200 = (REPO / "traces" / "h200").resolve()
PD = H200 / "pd"
NAMES = ["qwen3.5-35b-a3b-fp8-eager-1024in-32out", "qwen3.5-35b-a3b-fp8-eager-4096in-32out",
         "qwen3.5-35b-a3b-fp8-eager-4096in-32out-ucx-tls"]
PICK = "_pick_pd_run"
DOCS_IMG = REPO / "docs" / "img" / "pd.png"


def _open(make_app, run: str, runs: Path = H200):
    at = make_app("PD", runs=runs)
    at.session_state["pd_run"] = run
    return at.run()


def test_the_page_lists_the_pd_runs(make_app) -> None:
    at = ok(make_app("PD", runs=H200).run())
    assert at.selectbox(key=PICK).options == [f"pd/{n}" for n in NAMES]  # not pd/decode-alone (a plain capture)
    assert at.title[0].value == "PD"


@pytest.mark.parametrize("name", NAMES[:2])
def test_summary_timeline_and_requests_are_read_pd_runs(make_app, name: str) -> None:
    run = read_pd_run(PD / name)
    at = ok(_open(make_app, f"pd/{name}"))
    assert at.code[0].value == "\n".join(summary_lines(run.handoff))
    assert at.code[1].value == "\n".join(timeline_lines(run.timeline, run.timeline_note))
    t = run.timeline
    assert t is not None
    fig = figure(at, "pd_timeline")
    c = timeline_cents(t)  # the parts as analyze prints them: they add up to the title's TTFT
    assert [(b["name"], b["x"]) for b in fig["data"]] == [
        ("prefill server", [c["prefill_step_ms"]]), ("NIXL transfer", [c["xfer_ms"]]),
        ("decode server, first step", [c["decode_first_step_ms"]]), ("rest (HTTP, scheduling)", [c["other_ms"]])]
    assert [b["text"] for b in fig["data"]] == [[f"{v:,.2f} ms"] for v in (
        c["prefill_step_ms"], c["xfer_ms"], c["decode_first_step_ms"], c["other_ms"])]
    assert f"TTFT {c['ttft_ms']:,.2f} ms" in fig["layout"]["title"]["text"]
    assert round(sum(b["x"][0] for b in fig["data"]), 2) == c["ttft_ms"] == round(t.ttft_ms, 2)
    table = frame(at, "request", "profiled", "prefill ms", "handoff ms", "TTFT ms", "TPOT ms", "NIXL xfer ms", "MB")
    assert table.to_dict("records") == [
        {"request": q.index, "profiled": q.profiled, "prefill ms": round(q.prefill_ms, 2),
         "handoff ms": round(round(q.ttft_ms, 2) - round(q.prefill_ms, 2), 2), "TTFT ms": round(q.ttft_ms, 2),
         "TPOT ms": q.tpot_ms, "NIXL xfer ms": q.nixl.xfer_ms, "MB": q.nixl.bytes / 1e6}
        for q in run.handoff.requests]
    assert all(round(r["prefill ms"] + r["handoff ms"], 2) == r["TTFT ms"] for r in table.to_dict("records"))


def test_both_sides_are_the_breakdown_pages_chart(make_app) -> None:
    from phaseprof.dashboard import charts

    run = read_pd_run(PD / NAMES[1])
    at = ok(_open(make_app, f"pd/{NAMES[1]}"))
    assert [h.value for h in at.subheader][-2:] == ["prefill server", "decode server"]
    for side, bd in (("prefill", run.prefill), ("decode", run.decode)):
        fig = figure(at, f"pd_{side}_buckets")
        assert fig["layout"]["title"]["text"] == f"{side} server"
        want = charts.phase_buckets(bd, view="kernel", unit="ms").to_plotly_json()["data"]
        assert [(b["name"], list(b["y"]), list(b["x"])) for b in fig["data"]] == [
            (b["name"], list(b["y"]), list(b["x"])) for b in want]
    at.radio(key="pd_view").set_value("module").run()
    want = charts.phase_buckets(run.decode, view="module", unit="ms").to_plotly_json()["data"]
    assert [b["name"] for b in figure(ok(at), "pd_decode_buckets")["data"]] == [b["name"] for b in want]


def test_a_side_opens_on_the_breakdown_page(make_app) -> None:
    at = ok(_open(make_app, f"pd/{NAMES[1]}"))
    at.button(key="pd_open_prefill").click().run()
    ok(at)
    assert at.session_state["page"] == "Breakdown" and at.title[0].value == "Breakdown"
    assert at.session_state["current_run"] == f"pd/{NAMES[1]}/prefill/breakdown.json"
    assert f"pd/{NAMES[1]}/prefill/breakdown.json" in shown(at.markdown[0].value)
    assert figure(at, "phase_buckets")


def test_a_run_that_kept_no_breakdowns_shows_its_requests(make_app) -> None:
    """The UCX_TLS repeat kept only handoff.json and run.json: a line per missing side, the summary and the
    requests, no timeline and no bucket chart."""
    run = read_pd_run(PD / NAMES[2])
    at = ok(_open(make_app, f"pd/{NAMES[2]}"))
    assert [shown(w.value).split(" (")[0] for w in at.warning] == ["prefill server: no breakdown",
                                                                     "decode server: no breakdown"]
    assert at.code[0].value == "\n".join(summary_lines(run.handoff))
    assert [shown(i.value) for i in at.info] == timeline_lines(None, "a breakdown is missing")
    assert len(frame(at, "request", "TTFT ms")) == len(run.handoff.requests) == 6
    assert not at.get("plotly_chart")


def test_a_missing_decode_breakdown_is_one_line(make_app, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    shutil.copytree(PD / NAMES[0], runs / "r")
    (runs / "r" / "decode" / "breakdown.json").unlink()
    at = ok(_open(make_app, "r", runs=runs))
    assert len(at.warning) == 1
    line = shown(at.warning[0].value)
    assert line.startswith("decode server: no breakdown (") and "\n" not in line and "breakdown.json" in line
    assert [shown(i.value) for i in at.info] == timeline_lines(None, "a breakdown is missing")
    assert figure(at, "pd_prefill_buckets")
    assert not any("pd_decode_buckets" in c.proto.id or "pd_timeline" in c.proto.id for c in at.get("plotly_chart"))
    assert not [b for b in at.button if b.key == "pd_open_decode"]


def test_a_handoff_linked_out_of_the_runs_directory_is_refused(make_app, tmp_path: Path) -> None:
    runs, outside = tmp_path / "runs", tmp_path / "outside"
    shutil.copytree(PD / NAMES[0], runs / "r")
    outside.mkdir()
    shutil.move(runs / "r" / "handoff.json", outside / "handoff.json")
    (runs / "r" / "handoff.json").symlink_to(outside / "handoff.json")
    at = _open(make_app, "r", runs=runs)
    assert not at.exception
    assert [shown(e.value) for e in at.error] == [
        f"{runs.resolve() / 'r' / 'handoff.json'}: outside the runs directory {runs.resolve()} (the dashboard only "
        "reads files there or ones you upload)"]


def test_no_pd_run_says_how_to_capture_one(make_app) -> None:
    at = ok(make_app("PD").run())
    assert "No disaggregated (PD) run" in at.info[0].value


def test_runs_and_breakdown_pages_send_pd_runs_here(make_app) -> None:
    at = ok(make_app("Runs", runs=PD).run())
    df = frame(at, "run", "status")
    status = dict(zip(df["run"], df["status"]))
    assert {k: status[k] for k in NAMES} == dict.fromkeys(NAMES, "PD run: see the PD page")
    assert status["decode-alone"] == "record only: nothing to analyse"  # a plain capture's run.json, no trace
    assert not [b for b in at.button if b.key == "analyse_all"]  # no trace here: nothing to offer to analyse
    at = make_app("Breakdown", runs=PD)
    at.session_state["current_run"] = NAMES[2]
    ok(at.run())
    assert "is a disaggregated (PD) run" in shown(at.info[0].value)
    at.button(key="bd_open_pd").click().run()
    ok(at)
    assert at.session_state["page"] == "PD" and at.selectbox(key=PICK).value == NAMES[2]


def test_a_hostile_pd_run_stays_text(make_app, tmp_path: Path) -> None:
    """Run directory, model, connector, URLs, notes and every breakdown name are the payload: the page's figures
    and markdown carry it as text only (the walk of tests/dashboard/test_live_markup.py)."""
    from .test_live_markup import _walk

    runs = tmp_path / "runs"
    H._pd_run(runs / H.PD_RUN, H.PD_SOURCE)
    at = _open(make_app, H.PD_RUN, runs=runs)
    ok(at)
    assert at.selectbox(key=PICK).options == [H.PD_RUN]
    assert at.code[0].value.startswith(f"PD run of {H.PAYLOAD}")  # a code block: shown as written
    figures, texts = _walk(at, "PD")
    assert figures and texts


# ---------------------------------------------------------------------------------------------------- browser
#: Each drawn plotly chart's title, and the page boxes (px) of its plot area, x-axis title and legend.
BOXES = """Array.from(document.querySelectorAll('.js-plotly-plot')).map(g => {
  const box = s => { const e = g.querySelector(s); if (!e) return null; const r = e.getBoundingClientRect();
                     return {top: r.top, bottom: r.bottom, left: r.left, right: r.right}; };
  const t = g.querySelector('.gtitle'), x = g.querySelector('.g-xtitle');
  return {title: t ? t.textContent : '', xtitle_text: x ? x.textContent : '', plot: box('.nsewdrag'),
          xtitle: box('.g-xtitle'), legend: box('.legend')};
})"""


@pytest.mark.browser
def test_pd_in_chromium(tmp_path: Path) -> None:
    from .test_browser import page_on

    with page_on(H200, tmp_path, height=2300) as (page, url, errors):
        page.goto(f"{url}/?page=PD&pd=pd/{NAMES[1]}")
        page.get_by_role("button", name="Open in Breakdown").nth(1).wait_for(timeout=120_000)
        page.wait_for_function("!document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=120_000)
        page.wait_for_function("document.querySelectorAll('[data-testid=\"stPlotlyChart\"] .js-plotly-plot "
                               ".main-svg').length >= 3", timeout=60_000)
        page.wait_for_timeout(800)
        svg = page.evaluate("Array.from(document.querySelectorAll('.js-plotly-plot')).map(e => e.textContent)"
                            ".join(' ')")
        assert "NIXL transfer" in svg and "prefill server" in svg and "decode server" in svg, svg[:500]
        text = page.locator('[data-testid="stMain"]').inner_text()
        assert "Traceback" not in text and "internal error" not in text
        assert "PD run of qwen3.5-35b-a3b, NixlConnector: 4096 prompt + 32 output tokens" in text
        # In their half-width columns, each server's bucket chart keeps its legend under its axis title (the
        # legend had risen into "ms per step" as plotly grew the margin for its wrapped rows).
        boxes = page.evaluate(BOXES)
        sides = {b["title"]: b for b in boxes if b["title"] in ("prefill server", "decode server")}
        assert set(sides) == {"prefill server", "decode server"}, boxes
        for b in sides.values():
            assert b["xtitle_text"] == "ms per step" and b["legend"] and b["xtitle"], b
            assert b["legend"]["top"] >= b["xtitle"]["bottom"], b
            assert b["xtitle"]["top"] >= b["plot"]["bottom"], b
        shot = tmp_path / "pd.png"
        page.locator('[data-testid="stMain"]').screenshot(path=str(shot))  # no sidebar (a local path)
        if os.environ.get("PHASEPROF_UPDATE_DOCS_IMG"):
            shutil.copy(shot, DOCS_IMG)
        page.get_by_role("button", name="Open in Breakdown").nth(1).click()  # the decode server's
        page.get_by_text("Download breakdown JSON").first.wait_for(timeout=120_000)
        assert f"pd/{NAMES[1]}/decode/breakdown.json" in page.locator('[data-testid="stMain"]').inner_text()
        assert not errors, errors[:10]
