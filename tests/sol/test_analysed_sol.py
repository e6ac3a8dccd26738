"""The speed of light lives on the analysed trace (``sol.attach.analysed_sol``): the analyze CLI, the dashboard and a
capture's breakdown.json all read that one section, and it equals what ``attach_sol`` computes for the same
breakdown and run directory. On the committed H200 decode capture (traces/h200/graph, qwen3.5-35b-a3b)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from phaseprof.analysis.pipeline import AnalysisConfig, analyze
from phaseprof.capture.shared.rundir import analyze_into
from phaseprof.commands.main import main
from phaseprof.errors import PhaseprofError
from phaseprof.presets import load_preset
from phaseprof.report.json_io import load_breakdown
from phaseprof.sol.analyze import NEEDS_CONFIG
from phaseprof.sol.attach import analysed_sol, attach_sol, reported

REPO = Path(__file__).resolve().parents[2]
(RUN,) = (REPO / "traces" / "h200" / "graph").glob("*-h200-qwen3.5-35b-a3b-decode-128in-32out")
TRACE = RUN / "trace.json.gz"


@pytest.fixture(scope="module")
def analysed():
    return analyze(TRACE)


def test_sol_is_computed_once_on_the_analysed_trace(analysed) -> None:
    assert analysed.breakdown.sol is None  # the plain breakdown stays as it was
    sol = analysed_sol(analysed)
    assert sol.ok and sol.model_source == "preset qwen3.5-35b-a3b (named by the capture)"
    assert sol.ceiling.kind == "measured"  # traces/h200/ceilings/ above the run is found from the trace's path
    assert analysed_sol(analysed) is sol and reported(analysed).sol is sol
    assert reported(analysed) == attach_sol(analysed.breakdown, source=RUN)  # the stored-breakdown path agrees


def test_config_carries_model_config_and_ceilings(analysed) -> None:
    spec = analyze(analysed.tables, config=AnalysisConfig.with_rules(None, ceilings="spec"))
    assert analysed_sol(spec).ceiling.kind == "spec"
    assert analysed_sol(spec) == attach_sol(analysed.breakdown, source=RUN, ceilings="spec").sol
    named = analyze(analysed.tables, config=AnalysisConfig.with_rules(None, model_config="qwen3.5-35b-a3b"))
    assert analysed_sol(named).ok and analysed_sol(named).model_source == "preset qwen3.5-35b-a3b"
    bad = analyze(analysed.tables, config=AnalysisConfig.with_rules(None, model_config="no-such-model"))
    with pytest.raises(PhaseprofError):
        analysed_sol(bad)  # noqa: B018 - an explicit bad config is an error, raised where the section is read


def test_analyze_cli_writes_the_analysed_section(analysed, tmp_path: Path) -> None:
    out = tmp_path / "bd.json"
    assert main(["analyze", str(TRACE), "--json", str(out), "-f", "json"]) == 0
    assert load_breakdown(out) == reported(analysed)


def test_capture_breakdown_carries_sol_as_a_later_analyze_computes_it(tmp_path: Path) -> None:
    """A capture analyses its trace before run.json exists: the model config it passes gives the breakdown its
    sol section, the same one ``phaseprof analyze`` of the finished run directory computes."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "trace.json.gz").write_bytes(TRACE.read_bytes())
    without, err = analyze_into(run / "trace.json.gz", run)
    assert err is None and without.sol.model_source == "preset qwen3.5-35b-a3b (named by the capture)"
    config = load_preset("qwen3.5-35b-a3b").config_dict()  # what the capture's model source holds
    bd, err = analyze_into(run / "trace.json.gz", run, model_config=config)
    assert err is None and bd.sol.ok and bd.sol.model_source == "run.json model_config"
    assert bd.sol.phases == without.sol.phases  # same model, same numbers
    assert load_breakdown(run / "breakdown.json").sol == bd.sol
    recorded = orjson.loads((RUN / "run.json").read_bytes())  # this older run.json predates model_config
    (run / "run.json").write_bytes(orjson.dumps({**recorded, "model_config": config}))
    assert analysed_sol(analyze(run / "trace.json.gz")) == bd.sol


def test_cpu_trace_and_missing_config_say_why() -> None:
    cpu = analyze(REPO / "traces" / "cpu" / "tiny-hybrid-prefill128-decode8" / "trace.json.gz")
    assert analysed_sol(cpu).status == "not for CPU-only traces" and reported(cpu).sol == analysed_sol(cpu)
    foreign = analyze(REPO / "traces" / "public-cut" / "mi300x_sglang_qwen3_8b_decode.json.gz")
    assert analysed_sol(foreign).status == NEEDS_CONFIG and analysed_sol(foreign).notes
