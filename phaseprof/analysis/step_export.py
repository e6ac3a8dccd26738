"""One step (or a time window of it) as a small trace file of its own: the dashboard's Timeline export.

The file is a Kineto JSON subset: the source trace's own events of the step's host window, selected by
``phaseprof.trace.cut`` (unmodified; GPU work launched in the window is kept whole), with every top-level key
(``deviceProperties``, ``distributedInfo``, ...) as it was. So it opens where the source opens: Perfetto UI,
chrome://tracing, HTA's ``TraceAnalysis``, and ``phaseprof analyze``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from phaseprof.analysis.timeline import TimelineIndex, step_timeline
from phaseprof.errors import PhaseprofError
from phaseprof.trace.cut import CutStats, cut_document, encode, read_document

_OPEN = 1 << 60  # StepWindow's open ends (first/last step) are beyond this
_STEM = re.compile(r"(\.pt\.trace)?\.json(\.gz)?$")


@dataclass(frozen=True)
class StepExport:
    """A gzipped Kineto JSON document and what it holds."""

    data: bytes
    file_name: str  # ``<source stem>-step<N>[-<from>-<to>us].pt.trace.json.gz``
    start_us: float  # host window exported, in the source file's microseconds
    end_us: float
    stats: CutStats  # events in and out, kernels out


def export_window_ns(index: TimelineIndex, step: int, window_us: tuple[float, float] | None = None) -> tuple[int, int]:
    """Host window ``[lo, hi)`` (ns since the trace origin) whose events make step ``step``'s export.

    The step's own host window (its start as the Timeline draws it, to its host end: GPU work that runs past
    the end is still kept, through its launch call); ``window_us`` (µs since the step's start, as on the
    Timeline's axis) narrows it to a zoomed part.
    """
    tl = step_timeline(index, step=step)
    host_end = index.steps[step].host_end_ns
    lo, hi = tl.start_ns, host_end if host_end < _OPEN else tl.end_ns + 1
    if window_us is not None:
        a, b = window_us
        if not b > a:
            raise PhaseprofError(f"empty time window {a}..{b} µs")
        lo, hi = max(lo, tl.start_ns + round(a * 1000)), min(hi, tl.start_ns + round(b * 1000))
        if hi <= lo:
            raise PhaseprofError(f"time window {a}..{b} µs is outside step {step}")
    return int(lo), int(hi)


def export_step(path: str | Path, index: TimelineIndex, step: int, *,
                window_us: tuple[float, float] | None = None) -> StepExport:
    """The events of step ``step`` of the trace at ``path`` (the one ``index`` was built from) as a
    ``.pt.trace.json.gz`` file's bytes. Reads the whole source document once (orjson)."""
    lo, hi = export_window_ns(index, step, window_us)
    origin = index.tables.meta.origin_us
    start_us, end_us = origin + lo / 1000.0, origin + hi / 1000.0
    doc, stats = cut_document(read_document(path), start_us, end_us)
    return StepExport(data=encode(doc, gz=True), file_name=export_name(path, step, window_us),
                      start_us=start_us, end_us=end_us, stats=stats)


def export_name(path: str | Path, step: int, window_us: tuple[float, float] | None = None) -> str:
    """``<source stem>-step<N>[-<from>-<to>us].pt.trace.json.gz``; a run directory's ``trace.json.gz`` is
    named by its directory (every run directory holds one)."""
    p = Path(path)
    stem = _STEM.sub("", p.name) or "trace"
    if stem == "trace" or stem.startswith("rank"):
        stem = f"{p.parent.name}-{stem}"
    part = f"-{window_us[0]:.0f}-{window_us[1]:.0f}us" if window_us is not None else ""
    return f"{stem}-step{step}{part}.pt.trace.json.gz"
