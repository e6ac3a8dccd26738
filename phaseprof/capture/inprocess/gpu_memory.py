"""GPU memory around engine starts: the model's weight bytes (known before vLLM starts), what the device has
free, and the wait for an engine's memory to come back before the next engine starts.

vLLM refuses to start unless ``free >= gpu_memory_utilization x total`` (its start-up check), so a second engine
can only start once the first one's memory is back. phaseprof therefore runs the serving-timing engine in its own
process (``serving_child``) and, after that process ended, waits here until the driver reports the memory free.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from phaseprof.errors import PhaseprofError

GIB = float(1 << 30)
# Room besides the weights that any engine start needs: the CUDA context, activations of the profiling run,
# torch.compile's workspaces and CUDA-graph pools (the 35B-A3B preset on an H100: 65.0 GiB of weights, 68 GiB held).
START_RESERVE_BYTES = 4 << 30

#: ``() -> (free_bytes, total_bytes)`` of the device, as ``torch.cuda.mem_get_info()`` reports them.
MemoryProbe = Callable[[], tuple[int, int]]


def cuda_mem_info() -> tuple[int, int]:
    """``torch.cuda.mem_get_info()`` of device 0: free and total bytes as the driver sees them (every process)."""
    import torch  # noqa: PLC0415

    free, total = torch.cuda.mem_get_info(0)
    return int(free), int(total)


def weight_bytes(hf_config: dict[str, Any] | None, *, fp8: bool) -> int | None:
    """The model's weight bytes on one GPU, counted from its config (``memory.params``); with ``fp8`` as vLLM's
    online fp8 stores them (big linear layers in 1 byte). None when the config is unknown or not countable."""
    if not hf_config:
        return None
    from phaseprof.memory.model_shape import shape_from_hf_config  # noqa: PLC0415
    from phaseprof.memory.params import count_weights  # noqa: PLC0415

    cfg = dict(hf_config)
    if fp8:
        cfg["quantization_config"] = {"quant_method": "fp8"}
    try:
        return count_weights(shape_from_hf_config(cfg)).bytes_per_gpu
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None


def min_utilization(weights: int, total: int) -> float:
    """The smallest ``gpu_memory_utilization`` (two decimals, rounded up) whose budget holds the weights plus the
    start reserve: no lower value can work, whatever else is changed."""
    need = (weights + START_RESERVE_BYTES) / total
    return min(1.0, int(need * 100 + 0.9999) / 100)


@dataclass(frozen=True)
class FitCheck:
    """Whether an engine fits the device: ``weights`` and ``total`` bytes, the ``utilization`` budget, and
    ``kv_bytes`` when ``kv_cache_memory_bytes`` sizes the KV cache (vLLM then sizes nothing from the budget: the
    weights, that KV cache and the start reserve must fit the device itself)."""

    weights: int
    total: int
    utilization: float
    kv_bytes: int | None = None

    @property
    def need(self) -> int:
        """Bytes the engine needs at least: weights, reserve, and the given KV cache."""
        return self.weights + START_RESERVE_BYTES + (self.kv_bytes or 0)

    @property
    def room(self) -> float:
        """What it may use: the whole device with a given KV size, else the utilization budget."""
        return float(self.total) if self.kv_bytes else self.utilization * self.total

    @property
    def fits(self) -> bool:
        return self.need <= self.room

    def line(self) -> str:
        kv = f" + KV cache {self.kv_bytes / GIB:.1f} GiB" if self.kv_bytes else ""
        where = (f"the GPU's {self.total / GIB:.1f} GiB" if self.kv_bytes else
                 f"a {self.room / GIB:.1f} GiB budget (gpu_memory_utilization={self.utilization:g} of "
                 f"{self.total / GIB:.1f} GiB)")
        return f"weights {self.weights / GIB:.1f} GiB{kv} + {START_RESERVE_BYTES / GIB:.0f} GiB to start, in {where}"


def check_weights_fit(hf_config: dict[str, Any] | None, *, fp8: bool, model: str, total: int,
                      utilization: float, kv_bytes: int | None = None) -> FitCheck | None:
    """Refuse, in one line naming what fits instead, an engine whose weights cannot fit the device (before a
    start of minutes that would fail); the check otherwise (None when the weights are unknown)."""
    w = weight_bytes(hf_config, fp8=fp8)
    if w is None:
        return None
    check = FitCheck(weights=w, total=total, utilization=utilization, kv_bytes=kv_bytes)
    if check.fits:
        return check
    hints = []
    if not kv_bytes and min_utilization(w, total) <= 0.95:
        hints.append(f"--engine-arg gpu_memory_utilization={min_utilization(w, total):g}")
    if not fp8:
        w8 = weight_bytes(hf_config, fp8=True)
        if w8 is not None and FitCheck(w8, total, utilization, kv_bytes).fits:
            hints.append(f"--quant fp8 (weights {w8 / GIB:.1f} GiB)")
    hints.append("a smaller --model (phaseprof capture --list-presets)")
    raise PhaseprofError(f"{model} does not fit this GPU: {check.line()}; use " + " or ".join(hints), exit_code=2)


def wait_until_free(need: int, *, probe: MemoryProbe, timeout_s: float = 60.0, poll_s: float = 0.5,
                    clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
                    held_by: str = "the serving-timing engine") -> tuple[int, int]:
    """Wait until the device has ``need`` bytes free (the driver can take a moment after a process exits); the
    last ``(free, total)``. Raises one line saying how much did not come back and what to do."""
    deadline = clock() + timeout_s
    while True:
        free, total = probe()
        if free >= need:
            return free, total
        if clock() >= deadline:
            raise PhaseprofError(
                f"GPU memory did not come back after {held_by} ended: {free / GIB:.1f} of {total / GIB:.1f} GiB "
                f"free after {timeout_s:.0f} s, the next engine needs {need / GIB:.1f} GiB; see `nvidia-smi` for "
                "the process that holds it, or time and profile on one engine with --no-serving-timing",
                exit_code=1)
        sleep(poll_s)
