"""Per MoE layer, with measured routing: the experts touched, the load skew, and what the skew cost.

For each phase and MoE layer, summed over the phase's steps: the routed experts' floor with the experts the
layer really read, and the floor of the same tokens under a balanced load (every expert ``tokens·k/E`` rows, so
``min(E, tokens·k)`` experts read). The layer's measured MoE time comes from the module tree (the breakdown's
attribution, ``by_bucket_us["moe"]`` of the decoder layer); where there is none, only the floors are given.
``balanced_us = time · balanced floor / floor`` assumes the kernel keeps its efficiency under either load.
"""

from __future__ import annotations


import numpy as np

from phaseprof.analysis.results import Breakdown
from phaseprof.routing import Routing, gini, hottest
from phaseprof.sol.ceilings import Ceiling
from phaseprof.sol.model import SolModel
from phaseprof.analysis.sol_results import SolMoeLayer
from phaseprof.sol.work import StepTokens, Work, moe_layer
from phaseprof.trace.markers import parse_step_marker



def floor_us(w: Work, c: Ceiling, precision: str) -> tuple[float, bool]:
    """(floor in us, compute-bound?): ``max(flops / peak, bytes / bandwidth)``."""
    t_flops = w.flops / (c.tflops(precision) * 1e12)
    t_bytes = w.bytes / (c.hbm_tbps * 1e12)
    return max(t_flops, t_bytes) * 1e6, t_flops >= t_bytes


def _layer_times(bd: Breakdown, phase: str, moe_layers: int) -> list[float] | None:
    """The phase's MoE time per MoE layer (MoE layers in decoder order), from the module tree; None without."""
    att = bd.attribution
    pa = next((p for p in att.phases if p.phase == phase), None) if att is not None else None
    if pa is None:
        return None
    rows = sorted((r for r in pa.layers if "moe" in r.layer_type), key=lambda r: r.layer)
    if len(rows) != moe_layers:
        return None
    return [float(r.by_bucket_us.get("moe", 0.0)) for r in rows]


def moe_layers(bd: Breakdown, model: SolModel, ceiling: Ceiling, tokens: list[StepTokens | None], share: float,
               routing: Routing) -> list[SolMoeLayer]:
    """One row per (phase, MoE layer) over the steps whose routing was measured."""
    if not model.moe_layers or routing.counts.shape[1:] != (model.moe_layers, model.num_experts):
        return []
    where = {int(s): i for i, s in enumerate(routing.steps)}
    per_phase: dict[str, list[tuple[int, StepTokens]]] = {}
    for row, tok in zip(sorted(bd.steps, key=lambda r: r.index), tokens):
        m = parse_step_marker(row.label)
        if tok is None or tok.experts_touched is None or m is None or m.index not in where:
            continue
        per_phase.setdefault(row.phase, []).append((where[m.index], tok))
    out = []
    e, k = model.num_experts, model.top_k
    for phase, sel in per_phase.items():
        times = _layer_times(bd, phase, model.moe_layers)
        for li in range(model.moe_layers):
            counts = np.stack([routing.counts[si, li] for si, _ in sel])
            floor = balanced = 0.0
            for (_, tok), c in zip(sel, counts):
                n = tok.tokens
                floor += floor_us(moe_layer(model, n, int((c > 0).sum())).scaled(share), ceiling, model.compute)[0]
                balanced += floor_us(moe_layer(model, n, min(e, n * k)).scaled(share), ceiling, model.compute)[0]
            mean = counts.sum(axis=1) / e
            t = times[li] if times is not None else None
            bal = t * balanced / floor if t is not None and floor else None
            hot = hottest(counts[-1])
            out.append(SolMoeLayer(
                phase=phase, layer=li, steps=len(sel), tokens=sum(tok.tokens for _, tok in sel),
                distinct_experts=float((counts > 0).sum(axis=1).mean()),
                max_tokens_per_expert=int(counts.max()),
                max_over_mean=float(np.mean(counts.max(axis=1) / np.where(mean > 0, mean, 1))),
                gini=float(np.mean([gini(c) for c in counts])), hottest=hot, floor_us=floor,
                balanced_floor_us=balanced, time_us=t, balanced_us=bal,
                imbalance_us=None if bal is None or t is None else t - bal))
    return out
