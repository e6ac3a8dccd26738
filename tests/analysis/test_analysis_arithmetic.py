"""Step windows, idle split, bucket sums and counts on tiny inline traces (input and expected side by side)."""

from __future__ import annotations

import pytest

from phaseprof.analysis.pipeline import analyze_trace
from phaseprof.trace.markers import phaseprof_step_name

from ..builders import TraceBuilder

GEMM = "nvjet_tst_128x64_64x8_2x1_v_bz_TNT"  # real H200 GEMM kernel name family
MOE = "fused_moe_kernel"
NORM = "void vllm::rms_norm_kernel<c10::BFloat16, 8, 2>(c10::BFloat16*, c10::BFloat16 const*, long, long, "\
       "c10::BFloat16 const*, float, int, int)"


def test_idle_split_launch_overhead_host_work_and_queue(tmp_path):
    b = TraceBuilder()
    b.annotation(phaseprof_step_name(0, 1, 128, 0, 0), 0, 100)
    b.launch(GEMM, host_ts=0, host_dur=10, gpu_ts=12, gpu_dur=8)      # gap [0,12): host in launch 0-10, queue 10-12
    b.launch(GEMM, host_ts=30, host_dur=10, gpu_ts=41, gpu_dur=9)     # gap [20,41): host work 20-30, launch 30-40, queue 40-41
    # gap [50,100): nothing launched afterwards -> other (tail)
    bd = analyze_trace(b.write(tmp_path / "t.json"))
    (step,) = bd.steps
    assert step.phase == "prefill" and step.context_tokens == 128
    assert step.wall_us == pytest.approx(100)
    assert step.gpu_busy_us == pytest.approx(17)
    assert step.idle.launch_overhead_us == pytest.approx(10 + 10)
    assert step.idle.host_work_us == pytest.approx(10)
    assert step.idle.other_us == pytest.approx(2 + 1 + 50)
    assert step.idle.launch_overhead_us + step.idle.host_work_us + step.idle.other_us == pytest.approx(step.gpu_idle_us)


def test_overlapping_streams_bucket_times_sum_to_busy(tmp_path):
    b = TraceBuilder()
    b.annotation(phaseprof_step_name(0, 0, 0, 1, 1), 0, 200)
    b.launch(GEMM, 0, 5, gpu_ts=10, gpu_dur=100, stream=7)
    b.launch(MOE, 6, 5, gpu_ts=50, gpu_dur=100, stream=8)  # overlaps [50,110) with the GEMM
    bd = analyze_trace(b.write(tmp_path / "t.json"))
    (ph,) = bd.phases
    assert ph.phase == "decode"
    assert ph.gpu_busy_us == pytest.approx(140)
    kv = {x.bucket: x.time_us for x in ph.kernel_view}
    assert kv == pytest.approx({"gemm": 40 + 30, "moe": 30 + 40})
    assert sum(kv.values()) == pytest.approx(ph.gpu_busy_us)


def test_module_view_follows_the_op_stack(tmp_path):
    b = TraceBuilder()
    b.annotation(phaseprof_step_name(0, 1, 64, 0, 0), 0, 100)
    b.op("vllm::moe_forward_shared", 1, 50)
    b.op("aten::mm", 2, 10)
    b.launch(GEMM, 3, 2, gpu_ts=10, gpu_dur=10)  # launched inside the MoE op: gemm by kernel, moe by module
    b.launch(GEMM, 60, 2, gpu_ts=70, gpu_dur=10)  # outside: gemm in both views
    bd = analyze_trace(b.write(tmp_path / "t.json"))
    (ph,) = bd.phases
    assert {x.bucket: x.time_us for x in ph.kernel_view} == pytest.approx({"gemm": 20})
    assert {x.bucket: x.time_us for x in ph.module_view} == pytest.approx({"gemm": 10, "moe": 10})


def test_counts_launches_allocations_and_device_mallocs_per_step(tmp_path):
    b = TraceBuilder()
    for i, t0 in enumerate((0, 1000)):
        b.annotation(phaseprof_step_name(i, 0, 0, 1, 1), t0, 500)
        b.launch(NORM, t0 + 1, 2, t0 + 5, 3)
        b.launch(GEMM, t0 + 10, 2, t0 + 15, 3, api="cuLaunchKernel")
        b.memory(t0 + 20, 4096)
        b.memory(t0 + 21, -4096)
        b.memory(t0 + 22, 64, device_type=0)
    b.runtime("cudaMalloc", 30, 5)  # one real device malloc, in step 0 only
    bd = analyze_trace(b.write(tmp_path / "t.json"))
    s0, s1 = bd.steps
    assert s0.launches.by_api == {"cudaLaunchKernel": 1, "cuLaunchKernel": 1}
    assert s0.kernels == 2 and s1.kernels == 2
    assert (s0.memory.allocations, s0.memory.frees, s0.memory.gpu_allocations, s0.memory.cpu_allocations) == (2, 1, 1, 1)
    assert (s0.memory.device_mallocs, s1.memory.device_mallocs) == (1, 0)
    (ph,) = bd.phases
    assert ph.per_step["kernels"].mean == 2 and ph.per_step["allocations"].p50 == 2


def test_vllm_annotations_give_phases(tmp_path):
    b = TraceBuilder()
    b.annotation("execute_context_1(4096)_generation_0(0)", 0, 100)
    b.launch(GEMM, 1, 1, 5, 50)
    b.annotation("execute_context_0(0)_generation_1(1)", 200, 50)
    b.launch(GEMM, 201, 1, 205, 5)
    b.annotation("execute_context_1(512)_generation_3(3)", 300, 50)
    b.launch(GEMM, 301, 1, 305, 5)
    bd = analyze_trace(b.write(tmp_path / "t.json"))
    assert bd.step_detection["method"] == "markers:vllm"
    assert [s.phase for s in bd.steps] == ["prefill", "decode", "mixed"]
    assert [p.phase for p in bd.phases] == ["prefill", "mixed", "decode"]


def test_steps_inferred_from_sampler_kernel_without_markers(tmp_path):
    argmax = ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::ArgMaxOps<float>, "
              "unsigned int, long, 4, 4> >(at::native::ReduceOp<float, at::native::ArgMaxOps<float>, unsigned int, "
              "long, 4, 4>)")
    b = TraceBuilder()
    for t0 in (0, 100, 200):
        b.launch(GEMM, t0, 2, t0 + 5, 20)
        b.launch(argmax, t0 + 30, 2, t0 + 40, 2)
    bd = analyze_trace(b.write(tmp_path / "t.json"))
    assert bd.step_detection["method"] == "inferred:sampler-kernel"
    assert [s.kernels for s in bd.steps] == [2, 2, 2]
