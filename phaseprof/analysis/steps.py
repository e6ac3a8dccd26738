"""Find engine steps and their phases.

Order of evidence: phaseprof's own per-step markers, vLLM's ``execute_context_N(T)_generation_M(T)``
annotations, ``ProfilerStep#N``; without any, steps are inferred from what happens exactly once per step:
the sampler kernel (greedy argmax / top-k-top-p) launched at the end of every step, or one full
``cudaGraphLaunch`` per decode step. Idle gaps are never used: vLLM's async scheduling overlaps steps.
Steps are host-time windows; GPU work belongs to the step during which its launch call was made.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import numpy as np
import pandas as pd

from phaseprof.analysis.window import OPEN_END, OPEN_START
from phaseprof.classify.buckets import Bucket
from phaseprof.defaults import GRAPH_LAUNCH_APIS
from phaseprof.trace.markers import parse_step_marker
from phaseprof.trace.tables import label_in, labels

_NEG_INF, _POS_INF = OPEN_START, OPEN_END


class StepPhase(StrEnum):
    """The phase of one engine step, from its token counts (``capture.shared.options.Phase`` is a request's phase)."""

    PREFILL = "prefill"  # context tokens only
    DECODE = "decode"  # generation tokens only
    MIXED = "mixed"  # both in one step (chunked prefill alongside decodes)
    UNKNOWN = "unknown"  # step found without token counts


@dataclass(frozen=True)
class StepWindow:
    """One step: a host-clock window ``[host_start_ns, host_end_ns)``; an end at ``window.OPEN_START`` /
    ``OPEN_END`` is open (see ``analysis.window``)."""

    index: int
    host_start_ns: int
    host_end_ns: int
    phase: StepPhase
    label: str
    context_requests: int | None = None
    context_tokens: int | None = None
    generation_requests: int | None = None
    generation_tokens: int | None = None


@dataclass(frozen=True)
class StepDetection:
    method: str  # "markers:phaseprof" | "markers:vllm" | "markers:profiler_step" | "inferred:..." | "whole-trace"
    detail: str  # one sentence for humans: how the steps were found
    steps: tuple[StepWindow, ...]
    notes: tuple[str, ...] = ()  # what was done to the evidence (duplicate markers merged, ...): the breakdown's notes


#: The name this type had before ``capture.shared.options.Phase`` (a request's phase) made it ambiguous.
Phase = StepPhase


def phase_of(context_tokens: int | None, generation_tokens: int | None) -> StepPhase:
    if context_tokens is None or generation_tokens is None:
        return StepPhase.UNKNOWN
    if context_tokens > 0 and generation_tokens == 0:
        return StepPhase.PREFILL
    if context_tokens == 0 and generation_tokens > 0:
        return StepPhase.DECODE
    return StepPhase.MIXED if context_tokens > 0 else StepPhase.UNKNOWN


_PRIORITY = ("phaseprof", "vllm", "profiler_step")


def _from_markers(ops: pd.DataFrame) -> StepDetection | None:
    names = ops["name"].cat.categories
    parsed = {n: parse_step_marker(n) for n in names if ("_context_" in n or "ProfilerStep#" in n)}
    parsed = {n: m for n, m in parsed.items() if m is not None}
    if not parsed:
        return None
    for source in _PRIORITY:
        wanted = [n for n, m in parsed.items() if m.source == source]
        if not wanted:
            continue
        rows = ops[label_in(ops["name"], set(wanted))]  # as ``isin``, per category (2.4 MB less at 281k ops)
        starts, ends, names, notes = _disjoint(rows["ts_ns"].to_numpy(np.int64), rows["end_ns"].to_numpy(np.int64),
                                               labels(rows["name"]))
        steps = []
        for i, (s, e, name) in enumerate(zip(starts.tolist(), ends.tolist(), names.tolist())):
            m = parsed[name]
            steps.append(StepWindow(
                index=i, host_start_ns=s, host_end_ns=e,
                phase=phase_of(m.context_tokens, m.generation_tokens), label=name,
                context_requests=m.context_requests, context_tokens=m.context_tokens,
                generation_requests=m.generation_requests, generation_tokens=m.generation_tokens))
        what = {"phaseprof": "phaseprof capture step markers", "vllm": "vLLM execute_context annotations",
                "profiler_step": "torch.profiler ProfilerStep#N annotations"}[source]
        return StepDetection(f"markers:{source}", f"{len(steps)} step(s) from {what}", tuple(steps), notes)
    return None


def _disjoint(starts: np.ndarray, ends: np.ndarray, names: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[str, ...]]:
    """Step markers as disjoint host windows, by start, and notes saying what was changed. One engine step runs at
    a time on the host, so markers that share time are not several steps: an exact duplicate is merged into the
    first, a marker inside an earlier one is dropped, and one that starts before the previous ends starts where
    it ended. Without this, six copies of a marker gave its phase six times the trace's wall time."""
    if starts.size == 0:
        return starts, ends, names, ()
    order = np.lexsort((-ends, starts))  # by start, the longest first among equal starts
    starts, ends, names = starts[order], ends[order], names[order]
    prev_end = np.r_[np.iinfo(np.int64).min, np.maximum.accumulate(ends)[:-1]]
    same = np.r_[False, (starts[1:] == starts[:-1]) & (ends[1:] == ends[:-1])]
    inside = (ends <= prev_end) & ~same
    keep = ~(same | inside)
    trimmed = keep & (starts < prev_end)
    notes = []
    if same.any():
        notes.append(f"{int(same.sum())} duplicate step marker(s) (same start and end as another) merged: each step "
                     "counted once")
    if inside.any():
        notes.append(f"{int(inside.sum())} step marker(s) inside another step marker dropped (steps do not nest)")
    if trimmed.any():
        notes.append(f"{int(trimmed.sum())} step marker(s) overlapping the previous one start where it ended: no "
                     "wall time counted twice")
    starts = np.where(trimmed, prev_end, starts)
    return starts[keep], ends[keep], names[keep], tuple(notes)


def marker_steps(ops: pd.DataFrame) -> StepDetection | None:
    """Steps from the step markers among ``ops`` (name categorical, ts_ns, end_ns); None without markers."""
    return _from_markers(ops)


def _from_boundaries(ends: np.ndarray, method: str, detail: str) -> StepDetection:
    """Steps ending at each boundary (host ns): step k = [ends[k-1] + 1, ends[k] + 1), disjoint."""
    ends = np.sort(ends)
    starts = np.r_[_NEG_INF, ends[:-1] + 1]
    steps = tuple(StepWindow(index=i, host_start_ns=int(s), host_end_ns=int(e) + 1, phase=StepPhase.UNKNOWN,
                             label=f"step {i}") for i, (s, e) in enumerate(zip(starts, ends)))
    return StepDetection(method, detail, steps)


def detect_steps(*, ops: pd.DataFrame, runtime: pd.DataFrame, gpu: pd.DataFrame, gpu_launch: np.ndarray,
                 kernel_buckets: np.ndarray) -> StepDetection:
    """Find step windows. ``kernel_buckets`` is the kernel-view bucket of each ``gpu`` row."""
    found = _from_markers(ops) if not ops.empty else None
    if found is not None:
        return found
    call_end = runtime["end_ns"].to_numpy() if not runtime.empty else np.zeros(1, dtype=np.int64)  # none: unused
    launch_end = np.where(gpu_launch >= 0, call_end[np.maximum(gpu_launch, 0)], gpu["ts_ns"].to_numpy())
    # 1) The sampler runs once at the end of every step: its rarest kernel marks step ends.
    gpu_names = labels(gpu["name"])
    sampling = pd.Series(gpu_names[kernel_buckets == Bucket.SAMPLING])
    if not sampling.empty:
        counts = sampling.value_counts()
        anchor = counts.index[counts.to_numpy().argmin()]
        n = int(counts.min())
        if n == 1:
            return StepDetection("inferred:single-sampler", "one sampler kernel in the trace: treated as one "
                                 f"step ({anchor[:60]})",
                                 (StepWindow(0, _NEG_INF, _POS_INF, StepPhase.UNKNOWN, "step 0"),))
        rows = gpu_names == anchor
        return _from_boundaries(launch_end[rows], "inferred:sampler-kernel",
                                f"{n} steps inferred from the once-per-step sampler kernel {anchor[:60]!r}")
    # 2) Full CUDA-graph decode: one graph launch per step and (almost) nothing launched outside graphs.
    if not runtime.empty and gpu_launch.size:
        names = labels(runtime["name"])
        is_graph = np.isin(names, list(GRAPH_LAUNCH_APIS))
        launched_by_graph = np.where(gpu_launch >= 0, is_graph[np.maximum(gpu_launch, 0)], False)
        g = int(is_graph.sum())
        if g >= 2 and launched_by_graph.mean() > 0.9:
            return _from_boundaries(runtime["end_ns"].to_numpy()[is_graph], "inferred:graph-launch",
                                    f"{g} steps inferred from one full CUDA-graph launch per step")
    return StepDetection("whole-trace", "no step markers and no once-per-step kernel found: the whole trace "
                         "is treated as one step",
                         (StepWindow(0, _NEG_INF, _POS_INF, StepPhase.UNKNOWN, "whole trace"),))


def assign_to_steps(times_ns: np.ndarray, steps: tuple[StepWindow, ...]) -> np.ndarray:
    """Index of the step whose host window holds each time, or -1 (before/after/between steps)."""
    if not steps:
        return np.full(len(times_ns), -1, dtype=np.int64)
    starts = np.array([s.host_start_ns for s in steps], dtype=np.int64)
    ends = np.array([s.host_end_ns for s in steps], dtype=np.int64)
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], ends[order]
    t = np.asarray(times_ns, dtype=np.int64)
    # the last step starting at or before each time, if it has not ended: in place on one column (a call
    # per table, over every kernel and runtime call, made seven temporaries of it)
    pos = np.searchsorted(starts, t, side="right").astype(np.int64, copy=False)
    before = pos == 0
    pos -= 1
    pos[before] = 0
    out = ends[pos] <= t
    out |= before  # now: in no step
    if not (order == np.arange(order.size)).all():  # steps out of start order: their own indices
        pos = order[pos]
    pos[out] = -1
    return pos
