"""The FP8 capture's floors (traces/h200/fp8: qwen3.5-35b-a3b, vLLM online ``quantization=fp8`` from the dummy
bf16 weights, 4096-token prefill, graph mode). run.json has no quantized config: the engine's ``quant`` must
reach the work model, or the GEMMs' floor is a BF16 one above what the FP8 tensor cores measured (141% of light)."""

from __future__ import annotations

from pathlib import Path

import pytest

from phaseprof.records import RunRecord
from phaseprof.report.json_io import load_breakdown
from phaseprof.sol.attach import attach_sol, find_model
from phaseprof.sol.ceilings import load_measured

REPO = Path(__file__).resolve().parents[2]
(RUN,) = (REPO / "traces" / "h200" / "fp8").glob("*-h200-qwen3.5-35b-a3b-prefill-4096")
MEASURED = REPO / "phaseprof" / "sol" / "measured" / "h200.json"  # the H200 ceiling phaseprof ships


def _record(quant: str) -> RunRecord:
    return RunRecord.from_dict({"model": "qwen3.5-35b-a3b", "quant": quant})


@pytest.fixture(scope="module")
def sol():
    return attach_sol(load_breakdown(RUN / "breakdown.json"), source=RUN).sol


def test_the_capture_quant_reaches_the_model() -> None:
    model, _ = find_model([_record("fp8")])
    assert (model.quant, model.compute, model.weight_bytes, model.expert_weight_bytes) == ("fp8", "fp8", 1.0, 1.0)
    bf16, _ = find_model([_record("bf16")])
    assert (bf16.quant, bf16.compute, bf16.weight_bytes) == (None, "bf16", 2.0)


def test_fp8_gemm_and_moe_stay_under_their_floors(sol) -> None:
    measured = load_measured(MEASURED)
    assert sol.ceiling.kind == "measured" and sol.ceiling.precision == "fp8"
    assert sol.ceiling.tflops == measured["fp8_dense_tflops"]
    (ph,) = sol.phases
    by = {b.bucket: b for b in ph.buckets}
    for name in ("gemm", "moe"):
        assert by[name].pct_of_light < 100, (name, by[name].pct_of_light)
    # the GEMMs ran above the BF16 peak: only an FP8 floor can be a lower bound for them
    assert by["gemm"].achieved_tflops > measured["bf16_dense_tflops"]


def test_router_and_lm_head_stay_bf16(sol) -> None:
    """vLLM builds the MoE gate with quant_config=None and never quantizes the lm_head: their floors use the
    BF16 peak and 2-byte weights, the other GEMMs the FP8 peak and 1-byte weights."""
    from phaseprof.sol.work import Component, StepTokens, precision, router, shared_expert

    model, _ = find_model([_record("fp8")])
    assert precision(model, Component.ROUTER) == "bf16" and precision(model, Component.LM_HEAD) == "bf16"
    assert precision(model, Component.SHARED_EXPERT) == "fp8"
    t = StepTokens(prefill_lens=(1,))
    r = router(model, t)
    weights = r.bytes - model.moe_layers * (model.hidden + model.num_experts) * model.act_bytes
    assert weights == model.moe_layers * model.hidden * model.num_experts * 2
    s = shared_expert(model, StepTokens(prefill_lens=(1,)))
    assert s.bytes < model.moe_layers * 3 * model.hidden * model.shared_intermediate * 2  # 1-byte weights
