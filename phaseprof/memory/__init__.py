"""Memory planning for vLLM on hybrid attention/GDN models: unified KV block, per-request cost, capacity,
budget and the CUDA-graph scratch check. Pure functions over a config; no torch, no vllm.

Pipeline: ``load_hf_config → shape_from_hf_config → kv_layout → request_cost / capacity → memory_budget``,
wrapped by ``build_memory_plan(MemoryInputs) -> MemoryPlan``; ``report.plan_to_dict`` and ``render.render_plan``
only present it.
"""

# The names below load on first use (PEP 562): ``phaseprof analyze`` imports ``phaseprof.commands.memory`` to register
# its command, and need not pay for the planner (~50 ms of imports) on every start.
_LAZY = {
    "phaseprof.memory.gpus": ("KNOWN_GPUS", "lookup_gpu"),
    "phaseprof.memory.kv_plan": ("CacheSettings", "Capacity", "KvLayout", "RequestCost", "capacity", "kv_layout",
                                 "request_cost"),
    "phaseprof.memory.model_shape": ("ModelShape", "load_hf_config", "shape_from_hf_config"),
    "phaseprof.memory.plan": ("MemoryInputs", "MemoryPlan", "build_memory_plan"),
}
_WHERE = {name: mod for mod, names in _LAZY.items() for name in names}


def __getattr__(name: str) -> object:
    if name in _WHERE:
        import importlib

        value = getattr(importlib.import_module(_WHERE[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "KNOWN_GPUS", "CacheSettings", "Capacity", "KvLayout", "MemoryInputs", "MemoryPlan", "ModelShape",
    "RequestCost", "build_memory_plan", "capacity", "kv_layout", "load_hf_config", "lookup_gpu", "request_cost",
    "shape_from_hf_config",
]
