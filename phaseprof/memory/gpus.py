"""Known GPUs: memory as the vendor states it, and what vLLM actually sees where someone measured it (the
catalogue's entries with ``memory_gb``: ``phaseprof/gpus.toml``, read once into ``gpu_names.GpuEntry``, shared
with the speed of light).

HBM capacities are marketed in binary units: an "80 GB" H100 has five 16 GiB stacks, so ``stated_bytes`` is
``memory_gb * 2**30``. The driver keeps part of that (ECC, reserved pages), so ``torch.cuda.mem_get_info()``
reports less: ``visible_bytes`` is that total where we have a measurement (the source says where it came from),
else ``None`` and the planner falls back to ``stated_bytes`` and says so. vLLM's budget is
``visible_bytes * gpu_memory_utilization``.
"""

from __future__ import annotations

from phaseprof.errors import PhaseprofError
from phaseprof.gpu_names import GpuEntry, catalogue
from phaseprof.memory.defaults import GIB

#: The catalogue's GPUs with memory facts, in its order.
KNOWN_GPUS: tuple[GpuEntry, ...] = tuple(g for g in catalogue().gpus if g.memory_gb is not None)


def known_gpu_names() -> list[str]:
    return [g.name for g in KNOWN_GPUS]


def lookup_gpu(name: str) -> GpuEntry:
    """A GPU with memory facts by its name or an alias (``gpu_key``: case, spaces, dashes and underscores
    ignored). Unknown → PhaseprofError listing all."""
    entry = catalogue().gpu(name)
    if entry is None or entry.memory_gb is None:
        raise PhaseprofError(
            f"unknown GPU {name!r}; known: {', '.join(known_gpu_names())} (or give --gpu-memory GiB)"
        )
    return entry


def custom_gpu(memory_gib: float) -> GpuEntry:
    """A GPU given only by its memory (``--gpu-memory``): taken as the total vLLM sees, CUDA assumed."""
    if not memory_gib > 0:
        raise PhaseprofError(f"--gpu-memory must be a positive number of GiB, got {memory_gib}")
    return GpuEntry(f"custom {memory_gib:g} GiB", memory_gb=round(memory_gib), compute_capability=(9, 0),
                    vendor="custom", visible_bytes=round(memory_gib * GIB), visible_source="--gpu-memory")
