"""The per-GPU memory budget, the way ``Worker.determine_available_memory`` splits it (vLLM 0.23 and 0.28):

    requested      = device total * gpu_memory_utilization
    available KV   = requested - weights - (activation peak + non-torch memory) - CUDA-graph pool estimate

The activation peak (eager profile run at ``max_num_batched_tokens``) and the CUDA-graph estimate
(``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1``, the default since 0.21) are measured by vLLM at startup and
cannot be derived from a config: they come from a run's logs or from the caller, otherwise they are
"unknown" and the KV figure is an upper bound.
"""

from __future__ import annotations

from dataclasses import dataclass

from phaseprof.errors import PhaseprofError
from phaseprof.gpu_names import GpuEntry
from phaseprof.memory.kv_plan import Capacity, KvLayout, capacity


@dataclass(frozen=True)
class BudgetItem:
    """One consumer. ``source``: "config" (computed here), "run" (vLLM's log), "input" (given), "unknown"."""

    name: str
    bytes: int | None
    source: str
    note: str = ""


@dataclass(frozen=True)
class Budget:
    gpu_name: str
    total_bytes: int
    total_source: str
    gpu_memory_utilization: float
    weights: BudgetItem
    activation_peak: BudgetItem
    cudagraph_pool: BudgetItem
    capacity: Capacity

    @property
    def requested_bytes(self) -> int:
        """``requested_memory`` = total * utilization: all vLLM lets itself use."""
        return int(self.total_bytes * self.gpu_memory_utilization)

    @property
    def kv_cache_bytes(self) -> int:
        """What is left for the KV cache after weights, activations and the graph pool."""
        return self.capacity.kv_cache_bytes

    @property
    def kv_is_upper_bound(self) -> bool:
        """True when a consumer is unknown, so the real KV cache will be smaller."""
        return any(i.bytes is None for i in (self.weights, self.activation_peak, self.cudagraph_pool))

    @property
    def items(self) -> tuple[BudgetItem, ...]:
        return (self.weights, self.activation_peak, self.cudagraph_pool)


def memory_budget(*, gpu: GpuEntry, gpu_memory_utilization: float, weights: BudgetItem,
                  activation_peak: BudgetItem, cudagraph_pool: BudgetItem, layout: KvLayout,
                  max_model_len: int) -> Budget:
    if not 0 < gpu_memory_utilization <= 1:
        raise PhaseprofError(f"--gpu-memory-utilization must be in (0, 1], got {gpu_memory_utilization}")
    source = gpu.visible_source or "vendor-stated memory (not measured; vLLM sees a little less)"
    requested = int(gpu.total_bytes * gpu_memory_utilization)
    used = sum(i.bytes or 0 for i in (weights, activation_peak, cudagraph_pool))
    cap = capacity(layout, kv_cache_bytes=max(0, requested - used), max_model_len=max_model_len)
    return Budget(gpu.name, gpu.total_bytes, source, gpu_memory_utilization, weights, activation_peak,
                  cudagraph_pool, cap)
