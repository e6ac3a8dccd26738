"""The machine a capture runs on: GPU or CPU name and memory, and the versions that shaped the numbers."""

from __future__ import annotations

import os
import platform
import re
from dataclasses import asdict, dataclass
from typing import Literal

import phaseprof


@dataclass(frozen=True)
class DeviceInfo:
    """``kind`` is "cuda" when torch sees a CUDA GPU, else "cpu". ``memory_bytes``: GPU memory (cuda) or host
    RAM (cpu). ``slug``: the short name used in run directory names (e.g. ``h200``, ``cpu``)."""

    kind: Literal["cuda", "cpu"]
    name: str
    memory_bytes: int | None
    slug: str

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def cuda_available() -> bool:
    """torch.cuda.is_available(), False when torch itself is missing."""
    try:
        import torch  # noqa: PLC0415
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def gpu_slug(name: str) -> str:
    """``NVIDIA H200`` -> ``h200``; ``NVIDIA H100 80GB HBM3`` -> ``h100``; other names slugified."""
    low = name.lower().replace("nvidia", "").strip()
    m = re.search(r"\b([a-z]{1,3}\d{2,4}[a-z]?)\b", low)
    return m.group(1) if m else (re.sub(r"[^a-z0-9]+", "-", low).strip("-") or "gpu")


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _host_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def detect_device() -> DeviceInfo:
    """The first CUDA device if there is one, else the host CPU."""
    if cuda_available():
        import torch  # noqa: PLC0415

        props = torch.cuda.get_device_properties(0)
        return DeviceInfo(kind="cuda", name=props.name, memory_bytes=int(props.total_memory),
                          slug=gpu_slug(props.name))
    return DeviceInfo(kind="cpu", name=_cpu_name(), memory_bytes=_host_memory(), slug="cpu")


def versions() -> dict[str, str | None]:
    """phaseprof, vLLM, torch, CUDA (None on CPU builds), triton and Python versions."""
    out: dict[str, str | None] = {"phaseprof": phaseprof.__version__, "python": platform.python_version()}
    try:
        import torch  # noqa: PLC0415

        out["torch"] = torch.__version__
        out["cuda"] = torch.version.cuda
    except ImportError:
        out["torch"] = out["cuda"] = None
    try:
        import vllm  # noqa: PLC0415

        out["vllm"] = getattr(vllm, "__version__", None)
    except ImportError:
        out["vllm"] = None
    try:
        import triton  # noqa: PLC0415

        out["triton"] = triton.__version__
    except ImportError:
        out["triton"] = None
    return out
