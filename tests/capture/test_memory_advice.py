"""Out-of-memory advice matches the cause: vLLM's start-up free-memory check needs a LOWER utilization.

The GPU start-up message is produced by vLLM's own ``request_memory`` (``vllm/v1/worker/utils.py``, same text in
0.23 and 0.28) where vLLM imports; the texts below are those format strings filled with the H200 numbers of issue
11 (another process held ~40 GB) so the pure tests run without vLLM.
"""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from phaseprof.capture.inprocess.device import DeviceInfo
from phaseprof.capture.inprocess.engine import build_plan, explain_engine_error
from phaseprof.capture.inprocess.memory_advice import memory_advice
from phaseprof.capture.inprocess.models import resolve_model
from phaseprof.capture.shared.options import EngineOptions
from tests.capture._vllm import skip_without_vllm
from tests.capture.test_engine_plan import FIELDS

H200 = DeviceInfo(kind="cuda", name="NVIDIA H200", memory_bytes=141 << 30, slug="h200")
CPU = DeviceInfo(kind="cpu", name="cpu", memory_bytes=None, slug="cpu")
GIB = 1 << 30

GPU_STARTUP = ("Free memory on device cuda:0 (99.46/139.8 GiB) on startup is less than desired GPU memory "
               "utilization (0.85, 118.83 GiB). Decrease GPU memory utilization or reduce GPU memory used by other "
               "processes.")
CPU_STARTUP = ("Available memory on node 0 (10.5/31.2 GiB) on startup is less than desired CPU memory utilization "
               "(0.9, 28.08 GiB). On the CPU backend, the `--gpu-memory-utilization` flag controls the fraction of "
               "CPU memory reserved (despite its name). To resolve: decrease `--gpu-memory-utilization` (e.g. "
               "`--gpu-memory-utilization 0.5`) or reduce CPU memory used by other processes.")


def _plan(device: DeviceInfo, model: str):
    return build_plan(resolve_model(model), EngineOptions(model=model, max_prompt_tokens=4096), device=device,
                      fields=FIELDS)


def test_startup_check_advises_lowering_utilization() -> None:
    err = explain_engine_error(ValueError(GPU_STARTUP), _plan(H200, "qwen3.5-35b-a3b"))
    text = str(err)
    assert err.exit_code == 1 and "\n" not in text
    # 99.46 / 139.8 = 0.711: the largest setting that passes, with a hundredth of headroom
    assert "LOWER it: --engine-arg gpu_memory_utilization=0.7 " in text
    assert "only 99.46 of 139.8 GiB are free" in text and "asks for 118.83 GiB" in text
    assert "kv_cache_memory_bytes does not skip this check" in text
    assert "gpu_memory_utilization=0.9" not in text  # the old advice pointed the wrong way


def test_cpu_startup_check_names_the_cpu_fix() -> None:
    text = str(explain_engine_error(ValueError(CPU_STARTUP), _plan(CPU, "tiny-hybrid")))
    assert "gpu_memory_utilization=0.32" in text and "kv_cache_memory_bytes=<bytes>, which skips this check" in text


@pytest.mark.parametrize(("message", "on_gpu", "expect"), [
    ("No available memory for the cache blocks. Try increasing `gpu_memory_utilization`", True,
     r"KV cache does not fit.*raise --engine-arg gpu_memory_utilization"),
    ("CUDA out of memory. Tried to allocate 16.50 GiB", True, r"LOWER --engine-arg gpu_memory_utilization"),
    ("No available memory for the cache blocks.", False, r"larger --engine-arg kv_cache_memory_bytes"),
    ("RuntimeError: boom", True, None),
])
def test_other_memory_failures(message: str, on_gpu: bool, expect: str | None) -> None:
    advice = memory_advice(message, on_gpu=on_gpu)
    assert (advice is None) if expect is None else re.search(expect, advice or "")


def test_vllm_own_startup_message_is_recognised() -> None:
    """vLLM's real ``request_memory`` raises the message; phaseprof must parse its numbers."""
    skip_without_vllm()
    from vllm.v1.worker.utils import request_memory  # noqa: PLC0415

    snapshot = SimpleNamespace(total_memory=int(139.8 * GIB), free_memory=int(99.46 * GIB), device_="cuda:0")
    with pytest.raises(ValueError) as info:
        request_memory(snapshot, SimpleNamespace(gpu_memory_utilization=0.85))
    advice = memory_advice(str(info.value), on_gpu=True)
    assert advice is not None and "gpu_memory_utilization=0.7 " in advice and "99.46 of 139.8 GiB" in advice
