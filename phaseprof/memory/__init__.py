"""Memory planning for vLLM on hybrid attention/GDN models: unified KV block, per-request cost, capacity,
budget and the CUDA-graph scratch check. Pure functions over a config; no torch, no vllm.

Pipeline: ``load_hf_config → shape_from_hf_config → kv_layout → request_cost / capacity → memory_budget``,
wrapped by ``build_memory_plan(MemoryInputs) -> MemoryPlan``; ``report.plan_to_dict`` and ``render.render_plan``
only present it.
"""

from phaseprof.memory.gpus import KNOWN_GPUS, GpuSpec, lookup_gpu
from phaseprof.memory.kv_plan import CacheSettings, Capacity, KvLayout, RequestCost, capacity, kv_layout, request_cost
from phaseprof.memory.model_shape import ModelShape, load_hf_config, shape_from_hf_config
from phaseprof.memory.plan import MemoryInputs, MemoryPlan, build_memory_plan

__all__ = [
    "KNOWN_GPUS", "CacheSettings", "Capacity", "GpuSpec", "KvLayout", "MemoryInputs", "MemoryPlan", "ModelShape",
    "RequestCost", "build_memory_plan", "capacity", "kv_layout", "load_hf_config", "lookup_gpu", "request_cost",
    "shape_from_hf_config",
]
