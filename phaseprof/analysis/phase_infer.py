"""Evidence-based phases for marker-less steps, empty steps dropped, and the execution mode of a trace.

- Phase: a step without token counts gets the phase its work shows (``phases.toml``: chunked vs recurrent Gated
  DeltaNet kernels, ...), labelled inferred with the kernels seen; ``unknown`` only where nothing shows it.
- Empty steps (vLLM ends a profile with ``execute_context_0(0)_generation_0(0)``; a step window with no work at
  all) are not a phase: they are dropped and counted.
- Mode: full graphs (replay carries the forward pass, one graph launch per step), piecewise graphs (many graph
  launches per step, attention eager in between), both (vLLM's FULL_AND_PIECEWISE: full graphs for decode steps,
  piecewise for the rest), compiled (TorchInductor ``triton_*_fused`` kernels, launched
  directly), eager, or cpu.
"""

from __future__ import annotations

import dataclasses
import re
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from phaseprof.analysis.attribution_types import InferredPhase
from phaseprof.analysis.steps import Phase, StepDetection
from phaseprof.defaults import GRAPH_LAUNCH_APIS
from phaseprof.errors import PhaseprofError
from phaseprof.trace.tables import EventTables, label_in, labels

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

PHASES_PATH = Path(__file__).parents[1] / "classify" / "rules" / "phases.toml"
_INDUCTOR = re.compile(r"^triton_(poi|red|per|tem)_fused")
#: Share of a step's kernels launched by graph launches above which the step counts as graph-replayed.
GRAPH_SHARE = 0.5
#: Share of directly launched kernels that are TorchInductor's above which a run counts as compiled.
COMPILED_SHARE = 0.2


@lru_cache(maxsize=1)
def load_phase_evidence(path: Path = PHASES_PATH) -> tuple[tuple[str, re.Pattern[str]], ...]:
    """(phase, pattern) pairs from ``phases.toml``; every example must match its own patterns."""
    try:
        data = tomllib.loads(path.read_text())
        out = []
        for i, ev in enumerate(data["evidence"], 1):
            phase = Phase(ev["phase"]).value
            pats = [re.compile(p) for p in ev["patterns"]]
            for ex in ev.get("examples", []):
                if not any(p.search(ex) for p in pats):
                    raise PhaseprofError(f"[[evidence]] #{i}: example {ex!r} matches none of its patterns", path=path)
            out += [(phase, p) for p in pats]
    except (OSError, KeyError, TypeError, ValueError, re.error, tomllib.TOMLDecodeError) as e:
        raise PhaseprofError(f"bad phase evidence rules: {e}", path=path) from None
    return tuple(out)


def _is_empty(s) -> bool:  # noqa: ANN001 - StepWindow
    return s.context_tokens == 0 and s.generation_tokens == 0


def drop_empty_steps(det: StepDetection, items: pd.DataFrame) -> tuple[StepDetection, pd.DataFrame, int]:
    """Remove steps with zero tokens by their markers, or of unknown phase with no work item at all; renumber the
    rest (items of a dropped step leave the items: they are in no phase)."""
    has_work = set(items["step"].unique().tolist()) if len(items) else set()
    keep = [k for k, s in enumerate(det.steps)
            if not _is_empty(s) and (k in has_work or s.phase != Phase.UNKNOWN)]
    if len(keep) == len(det.steps) or not keep:
        return det, items, 0
    new_index = np.full(len(det.steps), -1, dtype=np.int64)
    new_index[keep] = np.arange(len(keep))
    steps = tuple(dataclasses.replace(det.steps[k], index=i) for i, k in enumerate(keep))
    dropped = len(det.steps) - len(keep)
    items = items.assign(step=new_index[items["step"].to_numpy()])
    items = items[items["step"] >= 0].copy()
    detail = f"{det.detail}; {dropped} empty step(s) dropped (no tokens or no work)"
    return StepDetection(det.method, detail, steps, det.notes), items, dropped


def infer_phases(det: StepDetection, items: pd.DataFrame) -> tuple[StepDetection, list[InferredPhase]]:
    """Fill in the phase of every ``unknown`` step from the kernels (or CPU ops) it ran."""
    unknown = [k for k, s in enumerate(det.steps) if s.phase == Phase.UNKNOWN]
    if not unknown or items.empty:
        return det, []
    evidence = load_phase_evidence()
    names = items["name"]
    cats = [str(c) for c in names.cat.categories] if hasattr(names, "cat") else sorted(set(map(str, names)))
    hit: dict[str, set[str]] = {}
    for n in cats:
        phases = {ph for ph, p in evidence if p.search(n)}
        if phases:
            hit[n] = phases
    if not hit:
        return det, []
    sub = items[items["step"].isin(unknown)]
    seen = sub[sub["name"].isin(list(hit))].groupby("step", observed=True)["name"].agg(
        lambda s: sorted(set(map(str, s))))
    steps = list(det.steps)
    out = []
    for k, kernels in seen.items():
        phases = set().union(*(hit[n] for n in kernels))
        phase = Phase.MIXED if len(phases) > 1 else Phase(next(iter(phases)))
        shown = ", ".join(n[:48] for n in kernels[:3]) + (f" (+{len(kernels) - 3})" if len(kernels) > 3 else "")
        steps[int(k)] = dataclasses.replace(steps[int(k)], phase=phase)
        out.append(InferredPhase(step=int(k), phase=phase.value, evidence=shown))
    return StepDetection(det.method, det.detail + f"; phases of {len(out)} step(s) inferred from their kernels",
                         tuple(steps), det.notes), out


def _inductor_names(names: pd.Series) -> np.ndarray:
    """Per row, whether its name (``labels``: a null is "") is an inductor-generated kernel's, each name tested once."""
    if isinstance(names.dtype, pd.CategoricalDtype):
        per = [bool(_INDUCTOR.match(str(c))) for c in names.cat.categories] + [bool(_INDUCTOR.match(""))]
        return np.asarray(per, dtype=bool)[names.cat.codes.to_numpy()]
    is_inductor = {n: bool(_INDUCTOR.match(n)) for n in dict.fromkeys(labels(names).tolist())}
    return np.fromiter(map(is_inductor.__getitem__, labels(names)), dtype=bool, count=len(names))


def infer_mode(t: EventTables, items: pd.DataFrame, det: StepDetection, device: str) -> tuple[str, str]:
    """(mode, evidence): how the forward passes ran (see module docstring)."""
    if device != "gpu":
        return "cpu", "CPU-only trace"
    if items.empty:
        return "eager", "no GPU work in steps"
    launch = items["launch"].to_numpy()
    by_graph = (launch >= 0) & label_in(t.runtime["name"], GRAPH_LAUNCH_APIS)[np.maximum(launch, 0)] \
        if len(t.runtime) else np.zeros(len(items), dtype=bool)
    direct = ~by_graph & label_in(items["kind"], ("kernel",))
    inductor = _inductor_names(items["name"])[direct]
    ind_share = float(inductor.mean()) if inductor.size else 0.0
    if by_graph.any():
        steps = items["step"].to_numpy()
        per_step = pd.Series(launch[by_graph]).groupby(steps[by_graph]).nunique()
        share = pd.Series(by_graph).groupby(steps).mean()
        graph_steps = share[share > GRAPH_SHARE].index
        launches = per_step.reindex(graph_steps).dropna()
        full, piecewise = int((launches <= 1).sum()), int((launches > 1).sum())
        pct = 100 * float(share[graph_steps].mean()) if len(graph_steps) else 0.0
        # steps with no replay but TorchInductor kernels: a batch above the largest capture size
        kernel = label_in(items["kind"], ("kernel",))
        ind_step = pd.Series(_inductor_names(items["name"])[kernel]).groupby(steps[kernel]).mean()
        compiled = int(((ind_step > COMPILED_SHARE) & (share.reindex(ind_step.index) == 0)
                        & (ind_step.index >= 0)).sum())  # -1: work outside the steps
        more = (f"; {compiled} step(s) torch.compile'd without graphs (TorchInductor kernels launched directly: a "
                "batch above the largest capture size)") if compiled else ""
        if full and piecewise:
            return "full and piecewise graphs", (
                f"{full} step(s) replay one full graph, {piecewise} step(s) "
                f"{float(launches[launches > 1].median()):.0f} piecewise graphs (median); {pct:.0f}% of their "
                "kernels replayed" + more)
        if full:
            return "full graphs", (f"{full} of {len(det.steps)} steps replay one graph each ({pct:.0f}% of their "
                                   "kernels)" + more)
        med = float(per_step.median())
        return "piecewise graphs", (f"{med:.0f} graph launches per step (median) with "
                                    f"{100 * (1 - by_graph.mean()):.0f}% of kernels launched directly in between"
                                    + more)
    if ind_share > COMPILED_SHARE:
        return "compiled", f"{100 * ind_share:.0f}% of kernels are TorchInductor triton_*_fused kernels, no graph replay"
    return "eager", f"no graph launches; {100 * ind_share:.0f}% TorchInductor kernels"
