"""Every public trace (../shared/traces/public, ``public`` tier) loads and gives a sane breakdown, and real facts
about each one hold (B200 gpt-oss moe from bmm_*/routing kernels, MI300X ``Cijk_`` GEMMs,
H100 Llama graph launches and communication kernels, ...)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

import pytest

from phaseprof.analysis.pipeline import analyze_trace
from phaseprof.analysis.results import Breakdown, PhaseSummary

from .facts import raw_events

pytestmark = pytest.mark.public


@lru_cache(maxsize=None)
def breakdown_of(path: Path) -> Breakdown:
    return analyze_trace(path)


def share(ph: PhaseSummary, bucket: str, view: str = "kernel") -> float:
    rows = ph.kernel_view if view == "kernel" else ph.module_view
    return next((b.share_pct for b in rows if b.bucket == bucket), 0.0)


def top_names(bd: Breakdown, bucket: str) -> list[str]:
    return [k.name for ph in bd.phases for k in ph.top_kernels.get(bucket, [])]


def launches(bd: Breakdown) -> Counter:
    c: Counter = Counter()
    for s in bd.steps:
        c.update(s.launches.by_api)
    return c


def only_phase(bd: Breakdown) -> PhaseSummary:
    assert len(bd.phases) == 1, [p.phase for p in bd.phases]
    return bd.phases[0]


def test_every_public_trace_gives_a_sane_breakdown(public_trace: Path) -> None:
    bd = breakdown_of(public_trace)
    assert bd.steps and bd.phases and bd.trace.device == "gpu"
    assert bd.totals["gpu_busy_us"] > 0 and bd.totals["kernels"] > 0
    for ph in bd.phases:
        # Bucket times add up to GPU busy time exactly, in both views (overlaps are split, never counted twice).
        for rows in (ph.kernel_view, ph.module_view):
            assert math.isclose(sum(b.time_us for b in rows), ph.gpu_busy_us, rel_tol=1e-9, abs_tol=1e-3)
            assert math.isclose(sum(b.share_pct for b in rows), 100.0, abs_tol=1e-6)
    unknown_us = sum(k.time_us for k in bd.unknown_kernels)
    assert unknown_us <= 0.05 * bd.totals["in_steps_busy_us"], f"{unknown_us:.0f} us unclassified"


def test_steps_do_not_count_gpu_time_twice(public_trace: Path) -> None:
    # Adjacent steps overlapping on other streams split their common GPU time (A100 recsys trace has such overlap).
    bd = breakdown_of(public_trace)
    assert bd.totals["in_steps_busy_us"] <= bd.totals["gpu_busy_us"] + 1e-6


def _h100_llama(bd: Breakdown) -> None:
    assert bd.trace.gpu_name == "NVIDIA H100 80GB HBM3" and bd.trace.distributed["world_size"] == 4
    assert len(bd.steps) == 10  # ISL 1000 / OSL 10: one prefill step and nine decode steps
    n = launches(bd)
    assert n["cudaGraphLaunch"] == 9 * 81  # piecewise CUDA graphs: 81 per decode step, none in the prefill
    assert [s.launches.graph_launches for s in bd.steps] == [0] + [81] * 9
    ph = only_phase(bd)
    assert share(ph, "gemm") > 60 and share(ph, "communication") > 5
    comm = top_names(bd, "communication")
    assert any(n.startswith("ncclDevKernel_AllReduce") for n in comm)
    assert any("cross_device_reduce" in n for n in comm)  # vLLM's custom all-reduce


def _mi300x_llama(bd: Breakdown) -> None:
    assert bd.trace.platform == "rocm" and bd.trace.gpu_name == "AMD Instinct MI300X"
    assert len(bd.steps) == 10
    n = launches(bd)
    assert n["hipGraphLaunch"] == 9 * 81 and n["hipLaunchKernel"] > 0 and not any(a.startswith("cu") for a in n)
    ph = only_phase(bd)
    assert share(ph, "gemm") > 40 and share(ph, "communication") > 10
    assert all(n.startswith("Cijk_") for n in top_names(bd, "gemm")[:3])


def _b200_gpt_oss(bd: Breakdown) -> None:
    assert bd.trace.gpu_name == "NVIDIA B200"
    ph = only_phase(bd)
    assert share(ph, "moe") > 40  # MXFP4 experts: the largest bucket
    moe = top_names(bd, "moe")
    assert sum(n.startswith("bmm_") for n in moe) >= 2
    assert any("moe::dev::routing" in n for n in moe)
    assert any("moe::dev::finalize" in n for n in moe)
    assert launches(bd)["cuLaunchKernelEx"] > 0  # TRT-LLM MoE kernels come through the driver API


def _mi300x_rocm_gemm(min_gemm: float) -> Callable[[Breakdown], None]:
    def check(bd: Breakdown) -> None:
        assert bd.trace.platform == "rocm"
        assert share(bd.phases[0], "gemm") > min_gemm
        assert top_names(bd, "gemm") and all(n.startswith("Cijk_") for n in top_names(bd, "gemm")[:3])
    return check


def _sglang_decode(bd: Breakdown) -> None:
    _mi300x_rocm_gemm(40)(bd)
    assert bd.step_detection["method"] == "markers:vllm"
    assert [(s.phase, s.generation_tokens) for s in bd.steps] == [("decode", 32)]
    assert bd.steps[0].launches.graph_launches == 1


def _sglang_prefill(bd: Breakdown) -> None:
    _mi300x_rocm_gemm(70)(bd)
    assert [(s.phase, s.context_tokens) for s in bd.steps] == [("prefill", 15360)]


def _vllm_gpt_oss_decode(bd: Breakdown) -> None:
    assert bd.trace.gpu_name == "AMD GPU (gfx94)"  # deviceProperties carry an empty name
    assert [(s.phase, s.generation_tokens) for s in bd.steps] == [("decode", 32)]
    assert share(bd.phases[0], "moe") > 50
    assert any(n.startswith("_matmul_ogs_") for n in top_names(bd, "moe"))
    assert bd.steps[0].launches.by_api.get("hipGraphLaunch") == 1  # FULL graph: one replay


def _vllm_gpt_oss_mixed(bd: Breakdown) -> None:
    assert [(s.phase, s.context_tokens, s.generation_tokens) for s in bd.steps] == [("mixed", 8155, 37)]
    assert share(bd.phases[0], "moe") > 50
    assert bd.steps[0].launches.by_api.get("hipGraphLaunch", 0) > 1  # PIECEWISE graphs


def _vllm_graph_capture(bd: Breakdown) -> None:
    assert bd.totals["kernels"] == 7  # kernels are captured into a graph, not run
    assert bd.step_detection["method"] == "whole-trace"


def _deepseek_train(bd: Breakdown) -> None:
    assert bd.trace.gpu_name == "NVIDIA H800" and bd.step_detection["method"] == "markers:profiler_step"
    assert share(bd.phases[0], "communication") > 30  # expert-parallel dispatch/combine
    assert any("dpsk::ep" in n for n in top_names(bd, "communication"))


def _hta_a100(bd: Breakdown) -> None:
    assert bd.trace.gpu_name == "NVIDIA A100-SXM4-80GB" and len(bd.steps) == 5
    assert any(n.startswith("ncclKernel_SendRecv") for n in top_names(bd, "communication"))


def _hta_ns(bd: Breakdown) -> None:
    assert bd.trace.gpu_name == "Tesla V100-SXM2-32GB" and len(bd.steps) == 5
    # Nanosecond timestamps keep their sub-microsecond part (HTA rounds them away by default).
    assert bd.totals["gpu_busy_us"] != round(bd.totals["gpu_busy_us"])


def _tb_plugin(bd: Breakdown) -> None:
    assert bd.trace.gpu_name == "Tesla V100-DGXS-32GB"
    assert bd.step_detection["method"] == "markers:profiler_step" and len(bd.steps) == 6
    assert [s.kernels for s in bd.steps] == [1462] * 6  # legacy 'Kernel' category, one ResNet-50 step each
    assert set(launches(bd)) == {"cudaLaunchKernel", "cudaMemsetAsync", "cudaMemcpyAsync"}  # legacy 'Runtime'


FACTS: dict[str, Callable[[Breakdown], None]] = {
    "traceMap__1_h100_1000isl_10osl_32con.pt.trace.json.gz": _h100_llama,
    "traceMap__1_mi300x_1000isl_10osl_32con.pt.trace.json.gz": _mi300x_llama,
    "TraceLens__b200__eager_trace.json.gz": _b200_gpt_oss,
    "TraceLens__inference__sglang_decode__sglang_Qwen3-8B_decode.json.gz": _sglang_decode,
    "TraceLens__inference__sglang_prefilldecode__sglang_Qwen3-8B_prefilldecode.json.gz": _sglang_prefill,
    "TraceLens__inference__vllm_decode_full__graph_execution.json.gz": _vllm_gpt_oss_decode,
    "TraceLens__inference__vllm_prefilldecode_piecewise__graph_execution.json.gz": _vllm_gpt_oss_mixed,
    "TraceLens__inference__vllm_decode_full__capture_traces__graph_capture_rank_0.1773709742341309550.pt.trace.json.gz":
        _vllm_graph_capture,
    "deepseek-profile-data__train.json.gz": _deepseek_train,
    "HTA__negative_queue_length_values_check__rank0.json.gz": _hta_a100,
    "HTA__ns_resolution_trace__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz": _hta_ns,
    "kineto-tb_plugin__resnet50_num_workers_0__worker0.1623143089861.pt.trace.json.gz": _tb_plugin,
}


def test_real_facts(public_trace: Path) -> None:
    check = FACTS.get(public_trace.name)
    assert check is not None, f"no facts written down for {public_trace.name}: add them to FACTS"
    check(breakdown_of(public_trace))


def test_rocm_cijk_kernels_are_all_gemm(public_dir: Path) -> None:
    """Every ``Cijk_*`` (hipBLASLt/Tensile GEMM) kernel of every ROCm trace is in the gemm bucket."""
    from phaseprof.classify.classifier import classify_kernels
    from phaseprof.classify.rules import load_rules

    seen = 0
    for p in sorted(public_dir.glob("*.json.gz")):
        names = {e["name"] for e in raw_events(p) if e.get("cat") == "kernel" and e["name"].startswith("Cijk_")}
        if names:
            seen += 1
            buckets = dict(zip(sorted(names), (str(b) for b in classify_kernels(sorted(names), load_rules()))))
            assert set(buckets.values()) == {"gemm"}, {n[:60]: b for n, b in buckets.items() if b != "gemm"}
    assert seen >= 5


def test_b200_step_comes_from_its_vllm_marker(public_dir: Path) -> None:
    bd = breakdown_of(public_dir / "TraceLens__b200__eager_trace.json.gz")
    assert bd.step_detection["method"] == "markers:vllm"
    assert [(s.phase, s.context_tokens) for s in bd.steps] == [("prefill", 888)]
