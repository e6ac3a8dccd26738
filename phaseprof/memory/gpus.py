"""Known GPUs: memory as the vendor states it, and what vLLM actually sees where someone measured it (the
catalogue's entries with ``memory_gb``: ``phaseprof/gpus.toml``, shared with the speed of light).

HBM capacities are marketed in binary units: an "80 GB" H100 has five 16 GiB stacks, so ``stated_bytes`` is
``stated_gb * 2**30``. The driver keeps part of that (ECC, reserved pages), so ``torch.cuda.mem_get_info()``
reports less: ``visible_bytes`` is that total where we have a measurement (the source says where it came from),
else ``None`` and the planner falls back to ``stated_bytes`` and says so. vLLM's budget is
``visible_bytes * gpu_memory_utilization``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from phaseprof.errors import PhaseprofError
from phaseprof.gpu_names import CATALOGUE_PATH, catalogue_gpus, gpu_key
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


def _spec(entry: dict[str, Any]) -> GpuSpec:
    """A catalogue entry's memory facts (``gpus.toml``); a malformed one → PhaseprofError naming it."""
    def fail(problem: str) -> PhaseprofError:
        return PhaseprofError(f"[[gpu]] {entry.get('name')!r}: {problem}", path=CATALOGUE_PATH)

    gb, cc, vis = entry["memory_gb"], entry.get("compute_capability"), entry.get("visible_bytes")
    if isinstance(gb, bool) or not isinstance(gb, int) or gb <= 0:
        raise fail(f"'memory_gb' must be a positive integer, not {gb!r}")
    if cc is not None and not (isinstance(cc, list) and len(cc) == 2 and all(type(x) is int for x in cc)):
        raise fail(f"'compute_capability' must be [major, minor], not {cc!r}")
    if vis is not None and (type(vis) is not int or vis <= 0 or not entry.get("visible_source")):
        raise fail("'visible_bytes' must be a positive integer, with its 'visible_source'")
    return GpuSpec(str(entry["name"]), gb, None if cc is None else (cc[0], cc[1]), str(entry.get("vendor", "")),
                   tuple(str(a) for a in entry.get("aliases", ())), vis, str(entry.get("visible_source", "")))


#: The catalogue's GPUs with memory facts, in its order.
KNOWN_GPUS: tuple[GpuSpec, ...] = tuple(_spec(g) for g in catalogue_gpus() if "memory_gb" in g)


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
