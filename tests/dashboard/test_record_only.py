"""Runs that kept only their record (run.json; no trace, no breakdown.json): the committed H200 decode against the
decode server alone (``traces/h200/pd/decode-alone``), the in-process Llama serving capture and a TP2 server
capture that kept its rank breakdowns. The Runs and Breakdown pages say what the record is and which files were
not kept, in the line ``phaseprof analyze`` of the directory prints (``records.record_only``), show the record's
own clean timings, and offer no analysis of them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from phaseprof.dashboard.views.runs import RECORD_STATUS
from phaseprof.records import RunRecord, record_only
from tests.conftest import PUBLIC_CUT_DIR, REPO

from .conftest import frame, ok, shown

H200 = REPO / "traces" / "h200"
RECORDS = {"decode-alone": H200 / "pd" / "decode-alone",
           "llama-serving": H200 / "serving" / "llama-3.1-8b-inprocess-decode-1024in-128out",
           "tp2": REPO / "traces" / "h200x2" / "server-tp2-ep" / "prefill-4096"}
TRACE = "mi300x_sglang_qwen3_8b_decode.json.gz"  # one real trace: the one thing here to analyse


@pytest.fixture()
def runs(tmp_path: Path) -> Path:
    # The dashboard remembers every trace it analysed, by content, for the life of its process (here: the test
    # session): another test's analysis of the same public trace would read as already analysed.
    import streamlit as st

    st.cache_resource.clear()
    st.cache_data.clear()
    root = tmp_path / "runs"
    for name, d in RECORDS.items():
        shutil.copytree(d, root / name)
    shutil.copy(PUBLIC_CUT_DIR / TRACE, root / TRACE)
    return root.resolve()


def _record(runs: Path, name: str):
    return record_only(runs / name, RunRecord.read(runs / name / "run.json"))


def test_the_runs_table_says_record_only_and_analyses_only_the_trace(make_app, runs: Path) -> None:
    at = ok(make_app("Runs", runs=runs).run())
    df = frame(at, "run", "status", "TPOT ms")
    status = dict(zip(df["run"], df["status"]))
    assert {status[n] for n in RECORDS} == {RECORD_STATUS} and status[TRACE] == "not analysed yet"
    for name in RECORDS:  # the row's timings are the record's own
        rec = RunRecord.read(runs / name / "run.json")
        row = df[df["run"] == name].iloc[0]
        assert [None if pd.isna(v) else v for v in (row["TTFT ms"], row["TPOT ms"])] == [rec.ttft_ms, rec.tpot_ms]
    (button,) = [b for b in at.button if b.key == "analyse_all"]
    assert button.label == "Analyse the 1 trace(s) not analysed yet"
    button.click().run()
    ok(at)  # nothing failed: the records were never handed to the analysis
    assert not [e for e in at.expander if "could not be analysed" in e.label]
    assert frame(at, "run", "status").set_index("run")["status"][TRACE] == "ok"


@pytest.mark.parametrize("name", list(RECORDS))
@pytest.mark.parametrize("page", ["Runs", "Breakdown"])
def test_the_current_record_is_shown_as_analyze_reads_it(make_app, runs: Path, page: str, name: str) -> None:
    only = _record(runs, name)
    at = make_app(page, runs=runs)
    at.session_state["current_run"] = name
    ok(at.run())
    assert [shown(i.value) for i in at.info] == [only.line]
    facts = dict(frame(at, "fact", "value").itertuples(index=False))
    rec = only.record
    assert facts["record"] == only.what and facts["not kept"] == ", ".join(only.not_kept)
    clean = {"TTFT": rec.ttft_ms, "TPOT": rec.tpot_ms}  # the TP2 prefill recorded no TPOT: no row, no metric
    assert {k: facts.get(f"{k} ms (clean median)") for k in clean} == {
        k: None if v is None else f"{v:,.2f}" for k, v in clean.items()}
    assert [(m.label, m.value) for m in at.metric] == [
        (f"{k} (clean, ms)", f"{v:,.2f}") for k, v in clean.items() if v is not None]
    assert facts["headline"].startswith(f"{rec.headline.metric} median {rec.headline.median_ms:,.2f} ms")
    if name == "tp2":
        assert facts["kept beside it"] == "rank0.breakdown.json, rank1.breakdown.json"
    if page == "Breakdown":
        assert not at.get("plotly_chart")  # nothing broken down


def test_the_line_is_what_analyze_prints(runs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from phaseprof.commands.main import main

    assert main(["analyze", str(runs / "decode-alone")]) == 2
    line = _record(runs, "decode-alone").line
    assert capsys.readouterr().err == f"error: {runs / 'decode-alone'}: {line}\n"
    assert line == ("nothing to analyse: run.json records a server capture; not kept beside it: trace.json.gz, "
                    "breakdown.json")
