"""Engine arguments per device and mode, decided by EngineArgs fields (capability checks), not versions."""

from __future__ import annotations

import pytest

from phaseprof.capture.inprocess.device import DeviceInfo, gpu_slug
from phaseprof.capture.inprocess.engine import build_plan, capture_sizes_for, explain_engine_error
from phaseprof.capture.inprocess.models import resolve_model
from phaseprof.capture.shared.options import EngineOptions, Mode, Quant
from phaseprof.errors import PhaseprofError

CPU = DeviceInfo(kind="cpu", name="cpu", memory_bytes=None, slug="cpu")
H200 = DeviceInfo(kind="cuda", name="NVIDIA H200", memory_bytes=141 << 30, slug="h200")
# Fields both vLLM 0.23 and 0.28 have; OLD lacks the newer ones.
FIELDS = {"model", "load_format", "skip_tokenizer_init", "max_num_seqs", "enable_prefix_caching", "max_model_len",
          "max_num_batched_tokens", "enforce_eager", "disable_log_stats", "seed", "async_scheduling",
          "gpu_memory_utilization", "kv_cache_memory_bytes", "gdn_prefill_backend", "compilation_config",
          "quantization", "dtype", "mamba_ssm_cache_dtype"}
OLD = FIELDS - {"async_scheduling", "gdn_prefill_backend", "kv_cache_memory_bytes", "mamba_ssm_cache_dtype"}


def plan(model: str = "tiny-hybrid", device: DeviceInfo = CPU, fields: set[str] = FIELDS, **kw):
    opts = EngineOptions(model=model, **({"max_prompt_tokens": 4096} | kw))
    return build_plan(resolve_model(model), opts, device=device, fields=fields)


def test_cpu_defaults() -> None:
    p = plan()
    kw = p.kwargs
    assert kw["load_format"] == "dummy" and kw["skip_tokenizer_init"] is True
    assert kw["enable_prefix_caching"] is False and kw["max_num_seqs"] == 2
    assert kw["max_model_len"] == 4097 and kw["max_num_batched_tokens"] == 4097
    assert kw["enforce_eager"] is True and kw["disable_log_stats"] is False
    assert kw["async_scheduling"] is False  # the profiled (marker-friendly) engine
    assert "async_scheduling" not in plan(async_scheduling=None).kwargs  # the timed one: vLLM's serving default
    assert kw["kv_cache_memory_bytes"] == 1 << 30 and "gpu_memory_utilization" not in kw
    assert kw["mamba_ssm_cache_dtype"] == "float32" and "gdn_prefill_backend" not in kw
    assert p.env == {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


def test_gpu_hybrid_eager() -> None:
    kw = plan("qwen3.5-35b-a3b", H200).kwargs
    assert kw["gpu_memory_utilization"] == 0.85 and kw["gdn_prefill_backend"] == "triton"
    assert "kv_cache_memory_bytes" not in kw and "compilation_config" not in kw


def test_capabilities_missing_in_older_vllm() -> None:
    kw = plan("qwen3.5-35b-a3b", H200, fields=OLD).kwargs
    assert "gdn_prefill_backend" not in kw and "async_scheduling" not in kw
    assert "async_scheduling" not in plan("qwen3.5-35b-a3b", H200, fields=OLD, async_scheduling=False).kwargs
    assert "kv_cache_memory_bytes" not in plan(fields=OLD).kwargs


def test_graph_mode_covers_the_prompt_and_avoids_the_seed_oom() -> None:
    p = plan("qwen3.5-35b-a3b", H200, mode=Mode.GRAPH, max_prompt_tokens=8192)
    kw = p.kwargs
    sizes = kw["compilation_config"]["cudagraph_capture_sizes"]
    assert kw["enforce_eager"] is False
    assert sizes[-1] == 8192 and 2112 in sizes and sizes == sorted(sizes)
    assert kw["kv_cache_memory_bytes"] == 4 << 30
    assert any("OOM" in n for n in p.notes)
    dense = plan("llama-3.1-8b", H200, mode=Mode.GRAPH).kwargs
    assert "kv_cache_memory_bytes" not in dense  # only hybrid models have 1056-token blocks


def test_graph_mode_respects_user_choices() -> None:
    kw = plan("qwen3.5-35b-a3b", H200, mode=Mode.GRAPH,
              engine_args={"compilation_config": {"cudagraph_capture_sizes": [1, 2]}}).kwargs
    assert kw["compilation_config"] == {"cudagraph_capture_sizes": [1, 2]} and "kv_cache_memory_bytes" not in kw
    assert kw["max_num_batched_tokens"] == 4097
    light = {"cudagraph_capture_sizes": [1, 2, 4, 512, 2048, 4224, 8192]}
    kw = plan("qwen3.5-35b-a3b", H200, mode=Mode.GRAPH, engine_args={"compilation_config": light}).kwargs
    assert kw["max_num_batched_tokens"] == 4224 and kw["kv_cache_memory_bytes"] == 4 << 30
    kw = plan("qwen3.5-35b-a3b", H200, mode=Mode.GRAPH, engine_args={"gpu_memory_utilization": 0.9}).kwargs
    assert kw["gpu_memory_utilization"] == 0.9 and "kv_cache_memory_bytes" not in kw
    assert plan(mode=Mode.GRAPH).kwargs["enforce_eager"] is False  # CPU: compile, no CUDA graphs
    assert "compilation_config" not in plan(mode=Mode.GRAPH).kwargs


def test_capture_sizes_cover_the_longest_prompt() -> None:
    assert capture_sizes_for(1) == [1]
    assert capture_sizes_for(128)[-2:] == [120, 128]
    assert capture_sizes_for(129)[-1] == 136
    assert capture_sizes_for(4096)[-3:] == [2112, 3168, 4224]  # a 4096-token prompt pads to the 4224 graph
    assert capture_sizes_for(8192)[-1] == 8192 and capture_sizes_for(9000)[-1] == 8192


def test_graph_mode_raises_the_token_budget_to_the_padded_graph() -> None:
    kw = plan("qwen3.5-35b-a3b", H200, mode=Mode.GRAPH, max_prompt_tokens=4096).kwargs
    assert kw["compilation_config"]["cudagraph_capture_sizes"][-1] == 4224
    assert kw["max_num_batched_tokens"] == 4224 and kw["max_model_len"] == 4097


def test_fp8_and_user_overrides() -> None:
    p = plan(quant=Quant.FP8, engine_args={"max_num_seqs": 8, "gpu_memory_utilization": 0.5})
    assert p.kwargs["quantization"] == "fp8" and p.env["VLLM_USE_DEEP_GEMM"] == "0"
    assert p.kwargs["max_num_seqs"] == 8 and p.kwargs["gpu_memory_utilization"] == 0.5
    assert "kv_cache_memory_bytes" not in p.kwargs  # the user chose the CPU memory knob


def test_unknown_engine_arg_suggests() -> None:
    with pytest.raises(PhaseprofError, match=r"bad --engine-arg max_modl_len: .*did you mean max_model_len"):
        plan(engine_args={"max_modl_len": 5})


@pytest.mark.parametrize(("exc", "match", "code"), [
    (RuntimeError("CUDA out of memory. Tried to allocate 16.50 GiB"), "out of memory.*gpu_memory_utilization", 1),
    (ValueError("No available memory for the cache blocks."), "out of memory", 1),
    (ValueError("max_model_len (9000) is greater than the derived max_model_len"), "fewer --tokens", 2),
    (RuntimeError("boom\nsecond line"), r"vLLM failed: boom second line", 1),
])
def test_engine_errors_are_one_line(exc: Exception, match: str, code: int) -> None:
    err = explain_engine_error(exc, plan("qwen3.5-35b-a3b", H200))
    assert err.exit_code == code and "\n" not in str(err)
    assert __import__("re").search(match, str(err))


def test_gpu_slug() -> None:
    assert gpu_slug("NVIDIA H200") == "h200"
    assert gpu_slug("NVIDIA H100 80GB HBM3") == "h100"
    assert gpu_slug("NVIDIA B200") == "b200"
    assert gpu_slug("NVIDIA A100-SXM4-80GB") == "a100"
