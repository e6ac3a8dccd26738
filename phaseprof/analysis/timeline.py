"""One step laid out in time: its GPU activities per stream, the host API calls beneath, idle gaps by cause.

Pure functions over the trace tables, no plotting (the dashboard's Timeline page draws what they return).
``index_prepared`` indexes a trace's prepared work items once (``AnalysedTrace.timeline``);
``step_timeline`` then cuts one step out of it cheaply.

The step window and the idle causes are the ones the breakdown uses (``phaseprof.analysis.breakdown``):
summing a step's idle segments by cause gives exactly that step's ``IdleSplit``, and the busy time is the
union of its work items (tests/dashboard/test_timeline.py checks both against ``analyze_trace``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import numpy as np
import pandas as pd

from phaseprof.analysis import intervals as iv
from phaseprof.analysis.breakdown import GpuWork
from phaseprof.analysis.prepare import Prepared
from phaseprof.analysis.steps import StepDetection, StepWindow, assign_to_steps
from phaseprof.analysis.window import HostCallKind, HostCalls, step_bounds
from phaseprof.errors import PhaseprofError
from phaseprof.trace.tables import EventTables, labels


class IdleCause(StrEnum):
    """Why the GPU sat idle during part of a step (the ``IdleSplit`` fields, one per segment)."""

    LAUNCH_OVERHEAD = "launch_overhead"  # next work not launched yet; host inside a launch API call
    HOST_WORK = "host_work"  # next work not launched yet; host doing anything else
    OTHER = "other"  # work launched but not started yet (queue), or after the step's last activity


@dataclass(frozen=True)
class TimelineIndex:
    """Per-trace inputs of ``step_timeline``, computed once by ``index_prepared``.

    ``items``: the breakdown's work items (GPU activities, or CPU ops on CPU-only traces) with their step,
    buckets and time share; ``host_step``: the step of every runtime/driver call (-1 outside steps).
    """

    tables: EventTables
    detection: StepDetection
    device: str  # "gpu" | "cpu"
    items: pd.DataFrame
    host_step: np.ndarray
    host_kind: np.ndarray  # HostCallKind value of every runtime row
    work: GpuWork  # all in-step GPU intervals sorted once, for per-step idle windows

    @property
    def steps(self) -> tuple[StepWindow, ...]:
        return self.detection.steps


@dataclass(frozen=True)
class StepTimeline:
    """One step. Times are ns since the trace origin (``start_ns`` is the step's start).

    - ``activities``: work items of the step: ``lane`` (``stream N`` / ``thread T``), ``name``, ``kind``,
      ``kernel_bucket``, ``module_bucket``, ``ts_ns``, ``end_ns``, ``launch_api`` (host call that launched it).
    - ``host_calls``: runtime/driver API calls of the step: ``lane`` (``host thread T``), ``name``, ``kind``
      (a ``HostCallKind`` value), ``ts_ns``, ``end_ns``.
    - ``idle``: GPU-idle segments inside the window, each with one ``cause`` (an ``IdleCause`` value) and the
      ``gap`` (index of the idle gap it belongs to); adjacent segments of one cause are merged.
    - ``gaps``: one row per idle gap (time with no work item on any stream): ``ts_ns``, ``end_ns`` and the ns
      of each cause in it (``launch_overhead_ns``, ``host_work_ns``, ``other_ns``), ``cause`` = the largest.
    """

    step: int
    label: str
    phase: str
    start_ns: int
    end_ns: int
    busy_ns: int  # the step's share of GPU busy: union of its activities, time shared with other steps split
    activities: pd.DataFrame
    host_calls: pd.DataFrame
    idle: pd.DataFrame
    gaps: pd.DataFrame

    @property
    def wall_ns(self) -> int:
        return self.end_ns - self.start_ns

    def idle_ns_by_cause(self) -> dict[str, int]:
        """Total idle ns per cause (every cause present, zero when absent)."""
        sums = (self.idle["end_ns"] - self.idle["ts_ns"]).groupby(self.idle["cause"]).sum()
        return {c.value: int(sums.get(c.value, 0)) for c in IdleCause}


def index_prepared(tables: EventTables, prep: Prepared) -> TimelineIndex:
    """The timeline index of a trace whose work items are already prepared."""
    t = tables
    det, device, items = prep.detection, prep.device, prep.items
    names = labels(t.runtime["name"])
    return TimelineIndex(tables=t, detection=det, device=device, items=items,
                         host_step=assign_to_steps(t.runtime["ts_ns"].to_numpy(), det.steps),
                         host_kind=HostCalls.of(names).kind, work=GpuWork(items))


def _inside(points: np.ndarray, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Whether each point lies in one of the sorted, disjoint intervals ``[s, e)``."""
    if s.size == 0:
        return np.zeros(points.size, dtype=bool)
    i = np.searchsorted(s, points, side="right") - 1
    return (i >= 0) & (points < e[np.maximum(i, 0)])


def idle_segments(*, gap_starts: np.ndarray, gap_ends: np.ndarray, starved_ends: np.ndarray,
                  launch_starts: np.ndarray, launch_ends: np.ndarray) -> pd.DataFrame:
    """Cut idle gaps into cause segments.

    In gap ``[gs, ge)`` the GPU is *starved* during ``[gs, starved_end)`` (its next work item had not been
    launched yet): the parts covered by a launch call are launch overhead, the rest host work; the remainder
    ``[starved_end, ge)`` is other. Returns ``ts_ns``, ``end_ns``, ``cause``, ``gap`` sorted by time.
    """
    gs = np.asarray(gap_starts, dtype=np.int64)
    ge = np.asarray(gap_ends, dtype=np.int64)
    se = np.asarray(starved_ends, dtype=np.int64)
    ls, le = iv.union(launch_starts, launch_ends)
    # Elementary segments between every boundary; each gets exactly one cause.
    bounds = np.unique(np.r_[gs, ge, se, ls, le])
    if bounds.size < 2:
        return pd.DataFrame({"ts_ns": np.zeros(0, np.int64), "end_ns": np.zeros(0, np.int64),
                             "cause": np.zeros(0, object), "gap": np.zeros(0, np.int64)})
    a, b = bounds[:-1], bounds[1:]
    in_gap = _inside(a, gs, ge)
    gap = np.searchsorted(gs, a, side="right") - 1
    starved = in_gap & (a < se[np.maximum(gap, 0)])
    in_launch = _inside(a, ls, le)
    cause = np.where(~starved, IdleCause.OTHER.value,
                     np.where(in_launch, IdleCause.LAUNCH_OVERHEAD.value, IdleCause.HOST_WORK.value))
    a, b, cause, gap = a[in_gap], b[in_gap], cause[in_gap].astype(object), gap[in_gap]
    if a.size == 0:
        return pd.DataFrame({"ts_ns": a, "end_ns": b, "cause": cause, "gap": gap})
    # Merge touching segments of one cause within one gap.
    new = np.r_[True, (a[1:] != b[:-1]) | (cause[1:] != cause[:-1]) | (gap[1:] != gap[:-1])]
    first = np.flatnonzero(new)
    last = np.r_[first[1:] - 1, a.size - 1]
    return pd.DataFrame({"ts_ns": a[first], "end_ns": b[last], "cause": cause[first], "gap": gap[first]})


def _gpu_idle(its: pd.DataFrame, start: int, end: int, index: TimelineIndex, k: int) -> pd.DataFrame:
    rt = index.tables.runtime
    rt_ts, rt_end = rt["ts_ns"].to_numpy(), rt["end_ns"].to_numpy()
    # Same gaps and starved parts as the breakdown's idle split (GpuWork.idle_gaps), cut into drawable segments.
    gs, ge, starved_end = index.work.idle_gaps(start, end, rt_end)
    sel = (index.host_kind == HostCallKind.LAUNCH.value) & (rt_ts < end) & (rt_end > start)
    return idle_segments(gap_starts=gs, gap_ends=ge, starved_ends=starved_end,
                         launch_starts=rt_ts[sel], launch_ends=rt_end[sel])


def _gap_table(idle: pd.DataFrame) -> pd.DataFrame:
    cols = [f"{c.value}_ns" for c in IdleCause]
    if idle.empty:
        return pd.DataFrame({"ts_ns": [], "end_ns": [], **{c: [] for c in cols}, "cause": []})
    d = idle.assign(ns=idle["end_ns"] - idle["ts_ns"])
    per = d.pivot_table(index="gap", columns="cause", values="ns", aggfunc="sum", fill_value=0)
    per = per.reindex(columns=[c.value for c in IdleCause], fill_value=0)
    span = d.groupby("gap").agg(ts_ns=("ts_ns", "min"), end_ns=("end_ns", "max"))
    out = span.join(per.rename(columns=lambda c: f"{c}_ns")).reset_index(drop=True)
    out["cause"] = per.to_numpy().argmax(axis=1)
    out["cause"] = [list(IdleCause)[i].value for i in out["cause"]]
    return out


def step_timeline(index: TimelineIndex, *, step: int) -> StepTimeline:
    """Cut step ``step`` (0-based, as in the breakdown's step rows) out of an indexed trace."""
    if not 0 <= step < len(index.steps):
        raise PhaseprofError(f"step {step} does not exist (the trace has {len(index.steps)} step(s))")
    sw = index.steps[step]
    t = index.tables
    its = index.items[index.items["step"] == step]
    rt = t.runtime
    start, end = step_bounds(sw.host_start_ns, sw.host_end_ns, its, rt["ts_ns"].to_numpy())
    busy = int(round(float(its["share_ns"].sum())))  # the step's share of GPU busy, as StepRow.gpu_busy_us
    if index.device == "gpu":
        lane = "stream " + its["stream"].astype(str)
        idle = _gpu_idle(its, start, end, index, step)
    else:
        lane = "thread " + t.ops["tid"].astype(str).to_numpy()[its["row"].to_numpy()]
        gs, ge = iv.gaps(its["ts_ns"].to_numpy(), its["end_ns"].to_numpy(), start, end)
        # CPU-only traces: every idle ns is host time outside any op, as in the breakdown.
        idle = pd.DataFrame({"ts_ns": gs, "end_ns": ge, "cause": IdleCause.HOST_WORK.value,
                             "gap": np.arange(gs.size)})
    launch = its["launch"].to_numpy()
    rt_names = rt["name"].astype(str).to_numpy()
    activities = pd.DataFrame({
        "lane": np.asarray(lane, dtype=object), "name": its["name"].astype(str).to_numpy(),
        "kind": its["kind"].astype(str).to_numpy(), "kernel_bucket": its["kernel_bucket"].astype(str).to_numpy(),
        "module_bucket": its["module_bucket"].astype(str).to_numpy(), "ts_ns": its["ts_ns"].to_numpy(),
        "end_ns": its["end_ns"].to_numpy(),
        "launch_api": np.where(launch >= 0, rt_names[np.maximum(launch, 0)] if rt_names.size else "", ""),
    }).sort_values("ts_ns", kind="stable").reset_index(drop=True)
    in_step = np.flatnonzero(index.host_step == step)
    host = pd.DataFrame({
        "lane": "host thread " + rt["tid"].astype(str).to_numpy()[in_step].astype(object),
        "name": rt_names[in_step], "kind": index.host_kind[in_step],
        "ts_ns": rt["ts_ns"].to_numpy()[in_step], "end_ns": rt["end_ns"].to_numpy()[in_step],
    }).sort_values("ts_ns", kind="stable").reset_index(drop=True)
    return StepTimeline(step=step, label=sw.label, phase=str(sw.phase), start_ns=start, end_ns=end,
                        busy_ns=int(busy), activities=activities, host_calls=host, idle=idle,
                        gaps=_gap_table(idle))
