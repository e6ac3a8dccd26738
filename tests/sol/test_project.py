"""Cross-GPU explanation (ceilings x efficiency) and ``phaseprof diff --project-to``."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from phaseprof.commands.main import main
from phaseprof.sol.project import explain, sentence
from phaseprof.analysis.sol_results import SolBucket, SolCeiling, SolPhase, SolSection

REPO = Path(__file__).resolve().parents[2]
(DECODE,) = (REPO / "traces" / "h200" / "graph").glob("*-decode-128in-32out")


def _section(gpu: str, tflops: float, tbps: float, moe_floor_us: float, moe_time_us: float, steps: int) -> SolSection:
    b = SolBucket("moe", 1e12, 1e10, moe_time_us, 100.0, "memory", 0.0, 0.0, moe_floor_us,
                  100 * moe_floor_us / moe_time_us)
    ph = SolPhase("decode", steps, moe_floor_us, moe_time_us, moe_time_us, None, None, [b])
    return SolSection("ok", "m", "test", SolCeiling(gpu, "spec", "s", "bf16", tflops, tbps, tflops / tbps), [ph])


def test_speedup_splits_into_ceilings_and_efficiency():
    # A: 2 steps, floor 1 ms/step, measured 4 ms/step (25%); B: 4 steps, floor 0.44 ms/step, 1.8 ms/step (24.4%)
    a = _section("H100-SXM", 989.4, 3.35, 2000.0, 8000.0, 2)
    b = _section("B200", 2250.0, 8.0, 1760.0, 7200.0, 4)
    (c,) = explain(a, b)
    assert (c.a_ms, c.b_ms) == pytest.approx((4.0, 1.8))
    assert c.speedup == pytest.approx(4.0 / 1.8)
    assert c.ceilings == pytest.approx(1.0 / 0.44)
    assert c.efficiency == pytest.approx((0.44 / 1.8) / (1.0 / 4.0))
    assert c.speedup == pytest.approx(c.ceilings * c.efficiency)
    assert sentence(c) == "decode moe 2.22x faster: ceilings 2.27x, efficiency 0.98x"


def test_project_decode_capture_to_b200(capsys):
    assert main(["diff", str(DECODE), "--project-to", "B200", "--format", "json"]) == 0
    doc = orjson.loads(capsys.readouterr().out)
    assert doc["estimate"] is True
    p = doc["projection"]
    assert p["source_gpu"] == "NVIDIA H200" and p["target"]["gpu"] == "B200"
    rows = {(b["phase"], b["bucket"]): b for b in p["buckets"]}
    moe = rows[("decode", "moe")]
    # memory-bound at batch 1: the floor ratio is the HBM ratio (H200 ceiling used / B200's 8.0 TB/s)
    ratio = p["source_ceiling"]["hbm_tbps"] / 8.0
    assert moe["target_floor_ms"] / moe["floor_ms"] == pytest.approx(ratio)
    assert moe["projected_ms"] == pytest.approx(moe["measured_ms"] * ratio)
    assert p["projected_busy_ms"]["decode"] < p["busy_ms"]["decode"]


def test_project_table_is_labelled_an_estimate(capsys):
    assert main(["diff", str(DECODE), "--project-to", "B200"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("ESTIMATE, not a measurement")
    assert max(len(line) for line in out.splitlines()) <= 80


def test_diff_without_b_or_projection_is_an_error(capsys):
    assert main(["diff", str(DECODE)]) == 2
    assert "--project-to" in capsys.readouterr().err


def test_project_to_unknown_gpu(capsys):
    assert main(["diff", str(DECODE), "--project-to", "V100"]) == 2
    assert "no ceilings for GPU 'V100'" in capsys.readouterr().err


def test_diff_prints_the_split_when_the_ceilings_differ(tmp_path, capsys):
    """The same H200 decode capture against datasheet ceilings (A) and a measured file (B): the times are
    equal, so the split must be ceilings x efficiency = 1 with ceilings = floor A / floor B."""
    from phaseprof.analysis.pipeline import analyze_trace
    from phaseprof.report.json_io import write_breakdown
    from phaseprof.sol.attach import attach_sol

    measured = {"schema_version": 1, "kind": "measured", "gpu_name": "NVIDIA H200", "sm_count": 132, "torch": "t",
                "cuda": "c", "measured_at": "test", "bf16_dense_tflops": 800.0, "fp8_dense_tflops": None,
                "hbm_copy_tbps": 4.0, "hbm_read_tbps": 4.0, "method": {}}
    m = tmp_path / "measured.json"
    m.write_bytes(orjson.dumps(measured))
    bd = analyze_trace(DECODE / "trace.json.gz")
    a = write_breakdown(attach_sol(bd, source=DECODE, ceilings="spec"), tmp_path / "a.json")
    b = write_breakdown(attach_sol(bd, source=DECODE, ceilings=m), tmp_path / "b.json")
    assert main(["diff", str(a), str(b), "--format", "json"]) == 0
    rows = {(r["phase"], r["bucket"]): r for r in orjson.loads(capsys.readouterr().out)["speed_of_light"]}
    moe = rows[("decode", "moe")]
    assert moe["speedup"] == pytest.approx(1.0)
    assert moe["ceilings"] == pytest.approx(4.0 / 4.8)  # memory-bound: the bandwidth ratio
    assert moe["efficiency"] == pytest.approx(4.8 / 4.0)
    assert main(["diff", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "speed of light: A H200 (spec) vs B NVIDIA H200 (measured), per step" in out
    assert "decode gemm 1.00x faster: ceilings 0.83x, efficiency 1.20x" in out
