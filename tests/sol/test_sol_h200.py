"""Speed of light on the committed H200 captures (traces/h200/graph: qwen3.5-35b-a3b, vLLM 0.23.0, CUDA graphs),
recomputed from the raw events (tests/h200/rawtrace.py) and the preset's config, and phaseprof's sol section
checked against that; plus what a trace without a model config gets."""

from __future__ import annotations

import json

import re
from fractions import Fraction
from pathlib import Path

import orjson
import pytest

from phaseprof.analysis.pipeline import analyze_trace
from phaseprof.commands.main import main
from phaseprof.records import SweepRecord
from phaseprof.sol.analyze import NEEDS_CONFIG, step_tokens
from phaseprof.sol.attach import attach_sol, find_model
from tests.h200.rawtrace import read

REPO = Path(__file__).resolve().parents[2]
GRAPH = REPO / "traces" / "h200" / "graph"
FOREIGN = REPO / "traces" / "public-cut" / "mi300x_sglang_qwen3_8b_decode.json.gz"
H200_BF16, H200_HBM = 989.4e12, 4.8e12  # datasheet, dense (gpus.toml)


def _run(suffix: str) -> Path:
    (hit,) = GRAPH.glob(f"*-h200-qwen3.5-35b-a3b-{suffix}")
    return hit


@pytest.fixture(scope="module")
def prefill():
    d = _run("prefill-4096")
    return d, read(d / "trace.json.gz"), attach_sol(analyze_trace(d / "trace.json.gz"), source=d, ceilings="spec")


@pytest.fixture(scope="module")
def decode():
    d = _run("decode-128in-32out")
    return d, attach_sol(analyze_trace(d / "trace.json.gz"), source=d, ceilings="spec")


def test_fused_moe_kernel_achieved_from_raw_events(prefill):
    _, raw, bd = prefill
    (step,) = raw.steps
    assert (step.context_tokens, step.generation_tokens) == (4096, 0)
    # routed experts of 35B-A3B at 4096 tokens: 2 * tokens * top-8 * (gate_up 2048x1024 + down 512x2048) * 40 layers
    flops = 2 * 4096 * 8 * (2048 * 1024 + 512 * 2048) * 40
    moe = [a for a in step.activities if a.name == "fused_moe_kernel"]
    assert len(moe) == 80  # w13 and w2 per layer
    t_ns = sum(raw.attributed[a] for a in moe)
    tflops = Fraction(flops, 1) / t_ns / 1000  # FLOP/ns -> TFLOP/s
    assert 305 < tflops < 312  # 26.7 ms -> ~309 TFLOP/s
    assert 30 < 100 * tflops * Fraction(10**12) / Fraction(H200_BF16) < 32  # % of the dense BF16 peak
    # phaseprof's moe bucket: same FLOPs; its time holds fused_moe_kernel plus the routing kernels
    sol = bd.sol
    assert sol.ok and sol.ceiling.gpu == "H200" and sol.ceiling.kind == "spec" and sol.model == "qwen3.5-35b-a3b"
    b = next(x for x in sol.phase("prefill").buckets if x.bucket == "moe")
    assert b.flops == flops
    assert float(t_ns) / 1e3 <= b.time_us < 1.1 * float(t_ns) / 1e3
    assert b.achieved_tflops == pytest.approx(flops / (b.time_us * 1e-6) / 1e12)
    # all 256 experts touched at 4096 tokens: 64.4 GB of weights; memory-bound at the H200's ridge (206 FLOP/B)
    assert b.bound == "memory" and b.bytes / 1e9 == pytest.approx(74.49, abs=0.01)
    assert b.floor_us == pytest.approx(b.bytes / H200_HBM * 1e6)
    assert b.pct_of_light == pytest.approx(100 * b.floor_us / b.time_us)


def test_prefill_buckets_and_step_floor(prefill):
    _, raw, bd = prefill
    ph = bd.sol.phase("prefill")
    by = {b.bucket: b for b in ph.buckets}
    assert set(by) == {"moe", "gemm", "gdn", "attention", "norm", "elementwise"}
    assert by["gemm"].bound == "compute" and by["attention"].bound == "compute"
    assert ph.floor_us == pytest.approx(sum(b.floor_us for b in ph.buckets))
    # the step's GPU busy from the raw events (union of its activities)
    assert ph.gpu_busy_us == pytest.approx(raw.steps[0].busy_ns / 1e3, abs=0.05)
    assert 0 < ph.pct_of_light_busy < 100 and ph.pct_of_light_wall < ph.pct_of_light_busy


def test_decode_is_weights_bound(decode):
    _, bd = decode
    ph = bd.sol.phase("decode")
    assert ph.steps == 4  # decode steps 1-4: the committed trace keeps the first 5 of 17 steps
    steps = [s for s in bd.sol.steps if s.phase == "decode"]
    # batch 1: about 6 GB of active weights per step -> ~1.25 ms at 4.8 TB/s
    for s in steps:
        assert 5.9e9 < s.bytes < 6.1e9
        assert s.floor_us == pytest.approx(s.bytes / H200_HBM * 1e6, rel=1e-3)
    assert all(b.bound == "memory" for b in ph.buckets)
    # KV length grows one token per step after the trace's own 128-token prefill (no fallback needed)
    tokens, notes = step_tokens(bd.steps, bd.capture)
    assert tokens[0].prefill_lens == (128,) and notes == []
    assert [t.decode_kv_lens for t in tokens[1:]] == [(129 + i,) for i in range(4)]


def test_sol_json_round_trip(prefill, tmp_path):
    from phaseprof.report.json_io import load_breakdown, write_breakdown

    _, _, bd = prefill
    back = load_breakdown(write_breakdown(bd, tmp_path / "b.json"))
    assert back.sol == bd.sol


def test_foreign_trace_needs_model_config(tmp_path, capsys):
    bd = attach_sol(analyze_trace(FOREIGN), source=FOREIGN)
    assert bd.sol.status == NEEDS_CONFIG and not bd.sol.phases
    out = tmp_path / "b.json"
    assert main(["analyze", str(FOREIGN), "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "needs --model-config" in printed
    assert orjson.loads(out.read_bytes())["sol"]["status"] == NEEDS_CONFIG


def test_cli_table_fits_80_columns_and_names_the_ceiling(capsys):
    d = _run("decode-128in-32out")
    assert main(["analyze", str(d), "--ceilings", "spec"]) == 0
    out = capsys.readouterr().out
    assert "speed of light on H200 (spec)" in out
    sol = out[out.index("speed of light on"):]
    assert max(len(line) for line in sol.splitlines()) <= 80
    assert "decode/step ms: floor 1.24, busy 4.21 (30% of light)" in sol


def test_sweep_floors_agree_with_the_traced_step(prefill, capsys):
    from phaseprof.sol.ceilings import spec_by_name
    from phaseprof.sol.sweep import sweep_floors

    (sweep_dir,) = GRAPH.glob("*-sweep-prefill-128-8192")
    rec = SweepRecord.read(sweep_dir / "sweep.json")
    model, _ = find_model((rec,))
    floors = {f.x: f for f in sweep_floors(rec, model, spec_by_name("H200"))}
    # the 4096 point's floor is the traced 4096-token prefill step's floor (same work, same ceiling)
    _, _, bd = prefill
    assert floors[4096].floor_ms == pytest.approx(bd.sol.phase("prefill").floor_us / 1e3)
    points = json.loads((sweep_dir / "sweep.json").read_text())["points"]  # the file's own numbers
    assert floors[4096].measured_ms == next(p["ttft"]["median_ms"] for p in points if p["prompt_tokens"] == 4096)
    xs = sorted(floors)
    assert all(floors[a].floor_ms < floors[b].floor_ms for a, b in zip(xs, xs[1:]))  # more tokens, more work
    assert [f.measured_ms for f in floors.values()] == [p["ttft"]["median_ms"] for p in points]
    assert main(["sweep", "--show", str(sweep_dir)]) == 0
    out = capsys.readouterr().out  # datasheet ceilings, or traces/h200/ceilings/ once that file is committed
    assert "speed of light vs measured TTFT" in out
    assert re.search(r"ceilings: (NVIDIA )?H200 \((spec|measured)\)", out)


def test_roofline_data(prefill):
    from phaseprof.sol.roofline import roofline_data

    _, _, bd = prefill
    data = roofline_data(bd.sol)
    assert data.gpu == "H200" and data.ridge_flop_per_byte == pytest.approx(989.4 / 4.8)
    moe = next(p for p in data.points if p.bucket == "moe")
    assert moe.achieved_tflops == next(b for b in bd.sol.phases[0].buckets if b.bucket == "moe").achieved_tflops
    # every point lies on or under the roof, except where the work model overestimates (it says so in a note)
    assert all(p.achieved_tflops <= data.roof(p.intensity_flop_per_byte) for p in data.points)
    assert data.roof(data.ridge_flop_per_byte * 10) == pytest.approx(989.4)  # the compute roof past the ridge
    assert roofline_data(attach_sol(analyze_trace(FOREIGN), source=FOREIGN).sol) is None


def test_measured_ceilings_beside_the_runs_count_for_a_gpu_phaseprof_ships_none_of(tmp_path, monkeypatch):
    """A capture session's ceilings/ folder (traces/h200/ceilings/ for traces/h200/graph/<run>/) holds its GPU's
    measured ceilings: breakdowns below it use them and say so — unless phaseprof ships a measured file for that
    GPU (phaseprof/sol/measured/), which wins wherever the run sits (one baseline per GPU)."""
    from phaseprof.sol import ceilings as C

    src = _run("prefill-4096")
    run = tmp_path / "h200" / "graph" / src.name
    run.mkdir(parents=True)
    for f in ("trace.json.gz", "run.json"):
        (run / f).write_bytes((src / f).read_bytes())
    (tmp_path / "h200" / "ceilings").mkdir()
    measured = {"schema_version": 1, "kind": "measured", "gpu_name": "NVIDIA H200", "sm_count": 132,
                "torch": "2.11.0+cu130", "cuda": "13.0", "measured_at": "test", "bf16_dense_tflops": 800.0,
                "fp8_dense_tflops": None, "hbm_copy_tbps": 4.0, "hbm_read_tbps": 4.2, "method": {}}
    (tmp_path / "h200" / "ceilings" / "h200-measured.json").write_bytes(orjson.dumps(measured))
    shipped = attach_sol(analyze_trace(run / "trace.json.gz"), source=run / "trace.json.gz").sol.ceiling
    assert (shipped.kind, shipped.tflops, shipped.hbm_tbps) == ("measured", 789.7, 4.331)
    assert shipped.source == "measured: phaseprof/sol/measured/h200.json (2026-11-30T21:41:45Z)"
    monkeypatch.setattr(C, "PACKAGED_DIR", tmp_path / "none shipped")
    bd = attach_sol(analyze_trace(run / "trace.json.gz"), source=run / "trace.json.gz")
    c = bd.sol.ceiling
    assert (c.kind, c.tflops, c.hbm_tbps) == ("measured", 800.0, 4.2) and "h200-measured.json" in c.source
    moe = next(b for b in bd.sol.phase("prefill").buckets if b.bucket == "moe")
    assert moe.floor_us == pytest.approx(moe.bytes / 4.2e12 * 1e6)
    forced = attach_sol(analyze_trace(run / "trace.json.gz"), source=run, ceilings="spec")
    assert forced.sol.ceiling.kind == "spec"
