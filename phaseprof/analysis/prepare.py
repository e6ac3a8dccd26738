"""The shared first half of every analysis: correlate, classify, find steps, build work items.

Called in one place, ``analysis.pipeline.analyze``: the breakdown numbers (``summarize``), the dashboard's
per-step drawing (``AnalysedTrace.timeline``) and the kernel order all read the one ``Prepared`` it returns, so
they can never disagree about which kernel belongs to which step or bucket.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pandas as pd

from phaseprof.analysis.attribution import ItemAttribution, attribute_items
from phaseprof.analysis.attribution_types import InferredPhase
from phaseprof.analysis.graph_align import Reference
from phaseprof.analysis.items import Coded, cpu_items, gpu_items, kernel_view_codes, op_module_codes
from phaseprof.analysis.layer_plan import LayerPlan
from phaseprof.analysis.phase_infer import drop_empty_steps, infer_phases
from phaseprof.analysis.steps import StepDetection, detect_steps
from phaseprof.classify.rules import RuleSet
from phaseprof.errors import TraceError
from phaseprof.trace.correlate import Correlated, correlate
from phaseprof.trace.limits import MAX_STEPS
from phaseprof.trace.tables import EventTables


@dataclass(frozen=True)
class Prepared:
    """``correlated`` and ``kernel_buckets`` are made again on first use (nothing after :func:`prepare` reads them
    as a rule: kept, they were a third of what an analysis keeps, ~3.4 MB at 117 MB, through its peak)."""

    device: str  # "gpu", or "cpu" for CPU-only traces (CPU ops are the work items)
    detection: StepDetection
    items: pd.DataFrame  # work items inside steps, with step, buckets and exclusive time share
    attribution: ItemAttribution | None = None  # module tree and graph alignment (see analysis.attribution)
    inferred_phases: tuple[InferredPhase, ...] = ()
    empty_steps_dropped: int = 0
    tables: EventTables | None = field(default=None, repr=False, compare=False)  # what was prepared
    kernel_view: Coded | None = field(default=None, repr=False, compare=False)  # kernel view per gpu row, as codes

    @cached_property
    def correlated(self) -> Correlated:
        """Launch and op-stack links of the tables (``trace.correlate``), as :func:`prepare` used them."""
        return correlate(self.tables)

    @cached_property
    def kernel_buckets(self) -> np.ndarray:
        """Kernel-view bucket per ``tables.gpu`` row (object array)."""
        return self.kernel_view.objects()


def prepare(t: EventTables, rules: RuleSet, *, reference: Reference | None = None,
            only_steps_in: tuple[int, int] | None = None, plan: LayerPlan | None = None,
            plan_note: str = "") -> Prepared:
    """``reference``: another trace's capture / eager kernel sequences, to attribute graph-replayed kernels.
    ``plan``: the model's layer plan (``analysis.layer_plan``) for structural attribution of graph replays;
    ``plan_note``: why there is none.
    ``only_steps_in``: keep only the steps starting in this host window (ns; ``--steps``), see :func:`_only_steps_in`."""
    c = correlate(t, compact=True)  # op_parent as int32: the same rows (Prepared.correlated makes the int64 one)
    device = "gpu" if not t.gpu.empty else "cpu"
    kview = kernel_view_codes(t.gpu["name"], rules) if device == "gpu" else Coded(np.zeros(0, np.int32),
                                                                                    np.zeros(0, dtype=object))
    kernel_buckets = kview.objects()
    det = detect_steps(ops=t.ops, runtime=t.runtime, gpu=t.gpu, gpu_launch=c.gpu_launch,
                       kernel_buckets=kernel_buckets)
    _check_step_count(det, t.meta.path, only_steps_in)
    del kernel_buckets  # an object per kernel: made again where asked for (Prepared.kernel_buckets)
    op_module = op_module_codes(t.ops, c.op_parent, rules)
    if device == "gpu":
        items = gpu_items(t, c, det, rules, kview, op_module)
    else:
        items = cpu_items(t, c, det, rules, op_module)
    items, ia = attribute_items(items, t, c, rules, op_module, device, reference=reference, plan=plan,
                                plan_note=plan_note)
    det, items, dropped = drop_empty_steps(det, items)
    det, inferred = infer_phases(det, items)
    if only_steps_in is not None:
        det, items = _only_steps_in(det, items, *only_steps_in)
    return Prepared(device=device, detection=det, items=items, attribution=ia, inferred_phases=tuple(inferred),
                    empty_steps_dropped=dropped, tables=t, kernel_view=kview)


def _check_step_count(det: StepDetection, path: str, window: tuple[int, int] | None) -> None:
    """One TraceError naming the trace when it has more steps (in the ``--steps`` window, when given) than
    ``MAX_STEPS``: the per-step work and rows grow with them (~10 KB and ~0.12 s a step), so a trace of a million
    steps is refused here, before that work, instead of taking ~9 GB and minutes."""
    n = len(det.steps) if window is None else sum(window[0] <= s.host_start_ns < window[1] for s in det.steps)
    if n > MAX_STEPS:
        raise TraceError(f"{n:,} steps: over the {MAX_STEPS:,} one analysis holds (about 10 KB of memory a step, "
                         f"{MAX_STEPS * 10 // 1000 // 1000:.0f} GB at the limit); analyse a range of them with "
                         "--steps FIRST:LAST", path=path)


def _only_steps_in(det: StepDetection, items: pd.DataFrame, lo_ns: int, hi_ns: int
                   ) -> tuple[StepDetection, pd.DataFrame]:
    """The steps starting in ``[lo_ns, hi_ns)``, renumbered from 0. The other steps' items stay with step -1:
    their GPU work inside the window is busy time of other steps, as in the whole-trace analysis."""
    keep = [k for k, s in enumerate(det.steps) if lo_ns <= s.host_start_ns < hi_ns]
    new_index = np.full(len(det.steps) + 1, -1, dtype=np.int64)  # the last slot: items already outside steps
    new_index[keep] = np.arange(len(keep))
    steps = tuple(dataclasses.replace(det.steps[k], index=i) for i, k in enumerate(keep))
    items = items.assign(step=new_index[items["step"].to_numpy()])
    return StepDetection(det.method, det.detail.replace(f"{len(det.steps)} step(s)", f"{len(keep)} step(s)", 1),
                         steps, det.notes), items
