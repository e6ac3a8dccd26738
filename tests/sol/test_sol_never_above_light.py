"""No committed H200 capture runs faster than its speed of light unless the floor rests on an assumed input,
and then the section names that assumption. Every trace and run directory under traces/h200: bf16 and
FP8, eager and graph, prefill and decode, phaseprof's own captures, vLLM's own profiler, a live server; against
the measured ceilings (traces/h200/ceilings) and against the datasheet."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from phaseprof.analysis.pipeline import analyze_trace
from phaseprof.report.json_io import load_breakdown
from phaseprof.sol.analyze import MODEL_BUG, ROUTING_ASSUMED
from phaseprof.sol.attach import attach_sol, find_model, run_record_of

H200 = Path(__file__).resolve().parents[2] / "traces" / "h200"
#: the measured ceilings' own margin: a kernel within 2% of a roof is timing noise, not a broken floor
TOLERANCE_PCT = 102.0
RUNS = sorted(p.parent for p in H200.rglob("breakdown.json"))
TRACES = sorted(p for p in H200.rglob("*.json.gz") if not (p.parent / "breakdown.json").exists())


def _sol(source: Path, ceilings: str | None):
    bd = load_breakdown(source / "breakdown.json") if source.is_dir() else analyze_trace(source)
    # phaseprof's captures name their model (run.json): qwen3.5-35b-a3b, and qwen3-30b-a3b / llama-3.1-8b in
    # shapes/. The vLLM-own, plain-profiler and server traces name none; their READMEs say qwen3.5-35b-a3b.
    named, _ = find_model((run_record_of(source), bd.capture))
    config = None if named is not None else "qwen3.5-35b-a3b"
    return attach_sol(bd, source=source, model_config=config, ceilings=ceilings).sol


def test_every_kind_of_capture_is_covered() -> None:
    names = [p.as_posix() for p in RUNS + TRACES]
    for part in ("/eager/", "/graph/", "/fp8/", "prefill", "decode", "/own-graph/", "/server-tp1/"):
        assert any(part in n for n in names), part


@pytest.mark.parametrize("ceilings", [None, "spec"], ids=["measured", "datasheet"])
@pytest.mark.parametrize("source", RUNS + TRACES, ids=lambda p: str(p.relative_to(H200)))
def test_no_bucket_beats_a_measured_floor(source: Path, ceilings: str | None) -> None:
    sol = _sol(source, ceilings)
    assert sol.ok, sol.status
    run = source if source.is_dir() else source.parent
    if (run / "run.json").is_file():  # judged against the model it ran (shapes/: qwen3-30b-a3b, llama-3.1-8b)
        assert sol.model == json.loads((run / "run.json").read_text())["model"]["name"]
    for ph in sol.phases:
        for b in ph.buckets:
            pct = b.pct_of_light or 0.0
            if not b.assumed:  # every input measured: the floor must hold
                assert pct <= TOLERANCE_PCT, (ph.phase, b.bucket, pct)
            if pct > 100:  # never silent: the broken assumption is named, in the bucket and in a note
                assert b.beats_floor and b.beats_floor != MODEL_BUG, (ph.phase, b.bucket)
                assert any(b.bucket in n and b.beats_floor in n for n in sol.notes)


def test_the_128_token_prefill_names_uniform_routing() -> None:
    """The decode capture's 128-token prefill: MoE at 111-114% of its uniform-routing floor on the measured
    ceilings (dummy weights route fewer tokens to fewer experts); the routing assumption is what broke."""
    (run,) = (H200 / "graph").glob("*-decode-128in-32out")
    sol = _sol(run, None)
    moe = next(b for b in sol.phase("prefill").buckets if b.bucket == "moe")
    assert moe.pct_of_light > 100 and moe.assumed == [ROUTING_ASSUMED] and moe.beats_floor == ROUTING_ASSUMED
    assert sol.routing == "uniform (assumed)" and all(s.routing == "uniform (assumed)" for s in sol.steps)


def test_within_two_percent_of_a_measured_ceiling_is_its_margin_not_a_bug() -> None:
    """The llama-3.1-8b eager 4K prefill (traces/h200/shapes): its GEMMs ran at 100.2% of GPU 0's measured BF16
    ceiling (784 TFLOP/s, traces/h200/ceilings/h200-measured.json), nothing assumed: named as the ceiling's own
    margin; against the ceiling phaseprof ships (the best of both GPUs measured, 789.7) they are under it, and
    against the datasheet far below their roof."""
    from phaseprof.sol.analyze import MEASURED_MARGIN

    trace = H200 / "shapes/llama-3.1-8b-eager-prefill-4096/trace.json.gz"
    gpu0 = str(H200 / "ceilings/h200-measured.json")
    gemm = next(b for b in _sol(trace, gpu0).phase("prefill").buckets if b.bucket == "gemm")
    assert 100 < gemm.pct_of_light <= TOLERANCE_PCT and gemm.assumed == [] and gemm.beats_floor == MEASURED_MARGIN
    shipped = next(b for b in _sol(trace, None).phase("prefill").buckets if b.bucket == "gemm")
    assert 99 < shipped.pct_of_light < 100 and shipped.beats_floor is None
    spec = next(b for b in _sol(trace, "spec").phase("prefill").buckets if b.bucket == "gemm")
    assert spec.pct_of_light < 100 and spec.beats_floor is None
