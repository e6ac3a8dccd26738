"""Known GPUs: memory as the vendor states it, and what vLLM actually sees where someone measured it.

HBM capacities are marketed in binary units: an "80 GB" H100 has five 16 GiB stacks, so ``stated_bytes`` is
``stated_gb * 2**30``. The driver keeps part of that (ECC, reserved pages), so ``torch.cuda.mem_get_info()``
reports less: ``visible_bytes`` is that total where we have a measurement (the source says where it came from),
else ``None`` and the planner falls back to ``stated_bytes`` and says so. vLLM's budget is
``visible_bytes * gpu_memory_utilization``.
"""

from __future__ import annotations

from dataclasses import dataclass

from phaseprof.errors import PhaseprofError
from phaseprof.gpu_names import gpu_key
from phaseprof.memory.defaults import GIB


@dataclass(frozen=True)
class GpuSpec:
    """One GPU model. ``compute_capability`` is ``None`` for non-CUDA devices (vLLM skips the CUDA-graph
    memory profile, and with it the scratch KV cache, on ROCm)."""

    name: str
    stated_gb: int
    compute_capability: tuple[int, int] | None
    vendor: str
    aliases: tuple[str, ...] = ()
    visible_bytes: int | None = None
    visible_source: str = ""

    @property
    def stated_bytes(self) -> int:
        """Memory as the vendor states it, in bytes (binary GB, see module docstring)."""
        return self.stated_gb * GIB

    @property
    def total_bytes(self) -> int:
        """What the planner uses as the device total: measured if known, else stated."""
        return self.visible_bytes if self.visible_bytes is not None else self.stated_bytes

    @property
    def is_cuda(self) -> bool:
        return self.compute_capability is not None

    @property
    def is_blackwell_datacenter(self) -> bool:
        """Compute capability 10.x: vLLM 0.28 raises its default max capture size to 1024 there."""
        return self.compute_capability is not None and self.compute_capability[0] == 10


def _gib(x: float) -> int:
    return round(x * GIB)


KNOWN_GPUS: tuple[GpuSpec, ...] = (
    GpuSpec("H100", 80, (9, 0), "NVIDIA", ("H100-SXM", "H100-80GB", "H100-SXM5-80GB"),
            _gib(79.18), "seed 000's OOM message on an H100 80GB ('total capacity of 79.18 GiB')"),
    GpuSpec("H100-PCIE", 80, (9, 0), "NVIDIA", ("H100-PCIE-80GB",)),
    GpuSpec("H100-NVL", 94, (9, 0), "NVIDIA", ("H100-NVL-94GB",)),
    GpuSpec("H200", 141, (9, 0), "NVIDIA", ("H200-SXM", "H200-141GB"), 150_109_880_320,
            "cuMemGetInfo total on an H200 SXM, driver 580.159.04 (139.80 GiB; a bare CUDA context took 0.51 GiB)"),
    GpuSpec("H200-NVL", 141, (9, 0), "NVIDIA"),
    GpuSpec("GH200", 96, (9, 0), "NVIDIA", ("GH200-96GB",)),
    GpuSpec("GH200-144GB", 144, (9, 0), "NVIDIA"),
    GpuSpec("B200", 180, (10, 0), "NVIDIA", ("B200-180GB", "HGX-B200")),
    GpuSpec("GB200", 186, (10, 0), "NVIDIA", ("GB200-NVL72",)),
    GpuSpec("B300", 288, (10, 3), "NVIDIA", ("HGX-B300",)),
    GpuSpec("GB300", 279, (10, 3), "NVIDIA", ("GB300-NVL72",),
            _gib(276.62), "seed 004: '279 GB ... driver overhead 2.28 GiB, vLLM on start has 276.62 GiB'"),
    GpuSpec("A100-80GB", 80, (8, 0), "NVIDIA", ("A100", "A100-SXM-80GB")),
    GpuSpec("A100-40GB", 40, (8, 0), "NVIDIA", ("A100-SXM-40GB",)),
    GpuSpec("L40S", 48, (8, 9), "NVIDIA"),
    GpuSpec("L40", 48, (8, 9), "NVIDIA"),
    GpuSpec("L4", 24, (8, 9), "NVIDIA"),
    GpuSpec("A10G", 24, (8, 6), "NVIDIA", ("A10",)),
    GpuSpec("RTX-6000-ADA", 48, (8, 9), "NVIDIA"),
    GpuSpec("RTX-PRO-6000", 96, (12, 0), "NVIDIA", ("RTX-PRO-6000-BLACKWELL",)),
    GpuSpec("MI300X", 192, None, "AMD"),
    GpuSpec("MI325X", 256, None, "AMD"),
    GpuSpec("MI355X", 288, None, "AMD"),
)


_INDEX: dict[str, GpuSpec] = {}
for _g in KNOWN_GPUS:
    for _key in (_g.name, *_g.aliases):
        _INDEX[gpu_key(_key)] = _g


def known_gpu_names() -> list[str]:
    return [g.name for g in KNOWN_GPUS]


def lookup_gpu(name: str) -> GpuSpec:
    """Exact name or alias, case/space/dash/underscore-insensitive. Unknown → PhaseprofError listing all."""
    spec = _INDEX.get(gpu_key(name))
    if spec is None:
        raise PhaseprofError(
            f"unknown GPU {name!r}; known: {', '.join(known_gpu_names())} (or give --gpu-memory GiB)"
        )
    return spec


def custom_gpu(memory_gib: float) -> GpuSpec:
    """A GPU given only by its memory (``--gpu-memory``): taken as the total vLLM sees, CUDA assumed."""
    if not memory_gib > 0:
        raise PhaseprofError(f"--gpu-memory must be a positive number of GiB, got {memory_gib}")
    return GpuSpec(f"custom {memory_gib:g} GiB", round(memory_gib), (9, 0), "custom",
                   visible_bytes=_gib(memory_gib), visible_source="--gpu-memory")
