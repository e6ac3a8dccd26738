"""Keep only the events of a time window while loading (``phaseprof analyze --steps``), in two passes.

Pass 1 (:class:`Scan`) streams the file keeping only step-marker ops, and records the trace's origin and the
times and correlation ids of runtime calls and GPU activities (a few numbers each: no names, no structs). Pass 2
(:class:`EventWindow`) keeps what the steps of the window need, so memory never holds the rest of the trace:

- runtime calls in the host window ``[lo, hi)`` launch the window's GPU work; ``hi_ext`` is the later of ``hi``
  and the end of that work (a step's wall runs to its last GPU activity);
- GPU activities launched in the window, or overlapping ``[lo, hi_ext]`` (a neighbouring step's work there
  counts as busy time of other steps), and the runtime calls that launched them;
- CPU ops, annotations, module scopes, runtime calls overlapping ``[lo, hi_ext]``, allocator events inside it,
  and every step marker (one op per step: the neighbouring steps must be found for their GPU work in the
  window to count as other steps' work; the analysis then reports the window's steps only).

Times are compared in the tables' integer nanoseconds from the whole trace's origin, computed as the tables
compute them, so a kept event has the same ``ts_ns`` as in a whole-trace load.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter

import numpy as np
import pandas as pd

from phaseprof.trace.schema import Event
from phaseprof.trace.tables import FAMILIES, correlations, durations

_NAME = attrgetter("name")


def is_marker_name(name: object) -> bool:
    """Whether ``name`` may be a step marker (``phaseprof.trace.markers`` parses it; this is the cheap test)."""
    return type(name) is str and ("_context_" in name or "ProfilerStep#" in name)


def _ns(ts_us: np.ndarray, origin_us: float) -> np.ndarray:
    return np.rint((ts_us - origin_us) * 1000.0).astype(np.int64)  # as TableBuilder computes ts_ns


class Scan:
    """Pass 1 (``tables.scan_trace``): a ``TableBuilder`` filter that keeps nothing and records the origin, the
    step-marker ops (name, start, duration) and, for runtime calls and GPU activities, start, end, correlation."""

    def __init__(self) -> None:
        self.origin_us = np.inf
        self._parts: dict[str, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {"runtime": [], "gpu": []}
        self._markers: list[tuple[str, float, float]] = []

    def __call__(self, family: str, evs: Sequence[Event], ts: np.ndarray) -> np.ndarray:
        if family in FAMILIES and ts.size:
            self.origin_us = min(self.origin_us, float(ts.min()))
        if family in self._parts:
            self._parts[family].append((ts, ts + durations(evs), correlations(evs)))
        elif family == "ops":
            names = list(map(_NAME, evs))
            marks = np.flatnonzero(np.fromiter(map(is_marker_name, names), dtype=bool, count=len(names)))
            if marks.size:
                dur = durations([evs[i] for i in marks.tolist()])
                self._markers += zip([names[i] for i in marks.tolist()], ts[marks].tolist(), dur.tolist())
        return np.zeros(len(evs), dtype=bool)

    def marker_ops(self) -> pd.DataFrame:
        """The step-marker candidates as an ``ops`` table (name, ts_ns, end_ns from the whole trace's origin)."""
        names = [m[0] for m in self._markers]
        ts = _ns(np.array([m[1] for m in self._markers], dtype=np.float64), self.origin_us)
        dur = np.rint(np.array([m[2] for m in self._markers], dtype=np.float64) * 1000.0).astype(np.int64)
        return pd.DataFrame({"name": pd.Categorical(names), "ts_ns": ts, "end_ns": ts + dur})

    def arrays(self, family: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(start ns, end ns, correlation) of every runtime call or GPU activity, from the origin."""
        parts = self._parts[family]
        if not parts:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
        ts, end, corr = (np.concatenate(p) for p in zip(*parts))
        return _ns(ts, self.origin_us), _ns(end, self.origin_us), corr


@dataclass(frozen=True)
class EventWindow:
    """Pass 2: a ``TableBuilder`` filter keeping what the steps in host window ``[lo_ns, hi_ns)`` need."""

    origin_us: float
    lo_ns: int
    hi_ns: int
    hi_ext_ns: int  # the later of hi_ns and the end of the GPU work launched in the window
    gpu_corr: np.ndarray  # sorted correlation ids of the GPU activities launched in the window
    runtime_corr: np.ndarray  # sorted correlation ids of the runtime calls that launched a kept GPU activity

    @classmethod
    def around(cls, scan: Scan, lo_ns: int, hi_ns: int) -> EventWindow:
        r_ts, _, r_corr = scan.arrays("runtime")
        g_ts, g_end, g_corr = scan.arrays("gpu")
        launched = np.unique(r_corr[(r_ts >= lo_ns) & (r_ts < hi_ns) & (r_corr >= 0)])
        by_launch = np.isin(g_corr, launched)
        hi_ext = max(hi_ns, int(g_end[by_launch].max(initial=hi_ns)))
        kept = by_launch | ((g_ts <= hi_ext) & (g_end >= lo_ns))
        return cls(origin_us=scan.origin_us, lo_ns=lo_ns, hi_ns=hi_ns, hi_ext_ns=hi_ext, gpu_corr=launched,
                   runtime_corr=np.unique(g_corr[kept & (g_corr >= 0)]))

    def __call__(self, family: str, evs: Sequence[Event], ts: np.ndarray) -> np.ndarray:
        ts_ns = _ns(ts, self.origin_us)
        if family == "memory":
            return (ts_ns >= self.lo_ns) & (ts_ns <= self.hi_ext_ns)
        end_ns = ts_ns + np.rint(durations(evs) * 1000.0).astype(np.int64)
        keep = (ts_ns <= self.hi_ext_ns) & (end_ns >= self.lo_ns)
        if family == "gpu":
            keep |= np.isin(correlations(evs), self.gpu_corr)
        elif family == "runtime":
            keep |= np.isin(correlations(evs), self.runtime_corr)
        elif family == "ops":
            keep |= np.fromiter(map(is_marker_name, map(_NAME, evs)), dtype=bool, count=len(evs))
        return keep
