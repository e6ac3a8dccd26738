"""The plan as a JSON document (``memory_plan.schema.json``, ``schema_version`` below)."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

import msgspec

from phaseprof.memory.defaults import SCHEMA_VERSION
from phaseprof.memory.kv_plan import Capacity
from phaseprof.memory.plan import MemoryPlan

SCHEMA_FILE = "memory_plan.schema.json"


def _capacity(c: Capacity | None) -> dict[str, Any] | None:
    return None if c is None else asdict(c)


def plan_to_dict(plan: MemoryPlan) -> dict[str, Any]:
    """Plain JSON types only; every byte count is an integer, every unit is in the key's name."""
    s, L, r, sc = plan.shape, plan.layout, plan.request, plan.scratch
    gdn = None
    if L.gdn is not None:
        gdn = {**asdict(L.gdn), "conv_shape": list(L.gdn.conv_shape), "ssm_shape": list(L.gdn.ssm_shape),
               "state_bytes": L.gdn.state_bytes}
    kv = {k: v for k, v in asdict(L).items() if k not in {"gdn", "predicted_log_lines"}}
    kv.update(vllm_version=plan.cache.vllm_version, gdn_state=gdn, pool_block_bytes=L.pool_block_bytes,
              attention_block_bytes_all_layers=L.attention_block_bytes_all_layers,
              predicted_log_lines=list(L.predicted_log_lines))
    budget = None
    if plan.budget is not None:
        b = plan.budget
        budget = {"gpu": b.gpu_name, "total_bytes": b.total_bytes, "total_source": b.total_source,
                  "gpu_memory_utilization": b.gpu_memory_utilization, "requested_bytes": b.requested_bytes,
                  "items": [asdict(i) for i in b.items], "kv_cache_bytes": b.kv_cache_bytes,
                  "kv_is_upper_bound": b.kv_is_upper_bound, "capacity": _capacity(b.capacity)}
    facts = None
    if plan.facts is not None:
        f = plan.facts
        said = {**msgspec.structs.asdict(f.engine), "preset": f.preset, "device_kind": f.device_kind,
                "vllm_version": f.vllm_version}
        facts = {**f.to_dict(), "source": f.source, "settings": {k: v for k, v in said.items() if v is not None}}
    return {
        "schema_version": SCHEMA_VERSION,
        "inputs": asdict(plan.inputs),
        "model": {"source": plan.model_source, "architecture": s.architecture, "model_dtype": s.model_dtype,
                  "num_layers": s.num_layers, "num_attention_layers": s.num_attention_layers,
                  "num_gdn_layers": s.num_gdn_layers, "num_kv_heads": s.num_kv_heads, "head_dim": s.head_dim,
                  "is_hybrid": s.is_hybrid, "max_model_len_tokens": plan.max_model_len},
        "kv_cache": kv,
        "request": {**asdict(r), "layer_blocks": r.layer_blocks},
        "weights": {"format": plan.weights.format, "params": plan.weights.params,
                    "bytes_per_gpu": plan.weights.bytes_per_gpu,
                    "components": [asdict(c) for c in plan.weights.components]},
        "serving": asdict(plan.serving),
        "cudagraph_scratch": {**{k: v for k, v in asdict(sc).items() if k != "fixes"},
                              "scratch_bytes": sc.scratch_bytes, "exceeds_free": sc.exceeds_free,
                              "tensors_before_oom": sc.tensors_before_oom,
                              "fixes": [asdict(f) for f in sc.fixes]},
        "budget": budget,
        "kv_budget": _capacity(plan.kv_budget),
        "vllm_facts": facts,
        "comparisons": [{**asdict(c), "difference": c.difference} for c in plan.comparisons],
        "warnings": list(plan.warnings),
    }


def plan_to_json(plan: MemoryPlan) -> str:
    return json.dumps(plan_to_dict(plan), indent=2)
