"""The numbers a one-minute report shows, read off a phase summary: per-step means and the top kernels.

Computed here (the analysis layer) so the terminal, markdown and dashboard renderers only format them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from phaseprof.analysis.results import KernelStat, PhaseSummary, StepRow

#: Kernels below this share of their phase's busy time are summed into one row of the top-kernel table.
MIN_KERNEL_SHARE_PCT = 0.5


def per_step(ph: PhaseSummary, total: float) -> float:
    """``total`` (a sum over the phase's steps) as the mean per step."""
    return total / ph.steps if ph.steps else 0.0


@dataclass(frozen=True)
class TopKernels:
    """The kernels of a phase at or above ``min_share_pct`` of its busy time, largest first, and the rest
    summed: ``rest_count`` launches taking ``rest_time_us`` (``rest_share_pct`` of busy), over all steps."""

    kernels: list[KernelStat]
    rest_count: int
    rest_time_us: float
    rest_share_pct: float
    min_share_pct: float


def top_kernels(ph: PhaseSummary, *, min_share_pct: float = MIN_KERNEL_SHARE_PCT,
                limit: int | None = None) -> TopKernels:
    """``ph``'s kernels with ``share_pct >= min_share_pct`` (at most ``limit``), and the rest of the phase's
    work items summed. The breakdown keeps the top kernels of each bucket only, so kernels past a bucket's
    list are in the rest even when above the threshold."""
    every = sorted((k for ks in ph.top_kernels.values() for k in ks), key=lambda k: (-k.time_us, k.name))
    shown = [k for k in every if k.share_pct >= min_share_pct][:limit]
    items = sum(b.count for b in ph.kernel_view)
    rest_us = max(ph.gpu_busy_us - sum(k.time_us for k in shown), 0.0)
    return TopKernels(kernels=shown, rest_count=max(items - sum(k.count for k in shown), 0), rest_time_us=rest_us,
                      rest_share_pct=100 * rest_us / ph.gpu_busy_us if ph.gpu_busy_us else 0.0,
                      min_share_pct=min_share_pct)


#: The idle causes of a step, in the order they are drawn after the buckets, with their short names.
IDLE_PARTS = (("launch_overhead_us", "idle: in launch calls"), ("host_work_us", "idle: host work"),
              ("other_us", "idle: queued / tail"))
#: The part of a step's wall time when the GPU ran neighbouring steps' work (``StepRow.gpu_busy_other_steps_us``).
OTHER_STEPS_PART = "busy: other steps' work"


@dataclass(frozen=True)
class StepPart:
    """One part of a phase's mean step: a bucket's GPU busy time (``kind`` "busy"), one cause of GPU idle time
    (``kind`` "idle", ``name`` from ``IDLE_PARTS``) or neighbouring steps' GPU work inside the step's window
    (``kind`` "overlap", ``OTHER_STEPS_PART``; only when there is some). ``ms_per_step``: its time summed over
    the phase's steps divided by their number; ``pct_of_wall``: of the phase's wall time. The parts of a phase
    sum to its wall time (busy buckets to GPU busy, idle causes to GPU idle)."""

    name: str
    kind: str
    ms_per_step: float
    pct_of_wall: float
    items_per_step: float  # work items (kernels, memcpys) per step; 0 for idle and overlap parts


def step_parts(ph: PhaseSummary, steps: Sequence[StepRow], *, view: str = "kernel") -> list[StepPart]:
    """``ph``'s mean step split into its buckets (``view``: "kernel" or "module"), its idle causes and the
    neighbouring steps' work its window held (from ``steps``, the breakdown's step rows: those of ``ph``'s phase
    are summed), so a 5%-busy step reads as 95% idle rather than as its busy time alone."""
    rows = ph.kernel_view if view == "kernel" else ph.module_view
    wall = ph.wall_us

    def pct(us: float) -> float:
        return 100 * us / wall if wall else 0.0

    parts = [StepPart(b.bucket, "busy", per_step(ph, b.time_us) / 1e3, pct(b.time_us), per_step(ph, b.count))
             for b in rows]
    parts += [StepPart(name, "idle", per_step(ph, getattr(ph.idle, f)) / 1e3, pct(getattr(ph.idle, f)), 0.0)
              for f, name in IDLE_PARTS]
    other = sum(r.gpu_busy_other_steps_us for r in steps if r.phase == ph.phase)
    if other > 0:
        parts.append(StepPart(OTHER_STEPS_PART, "overlap", per_step(ph, other) / 1e3, pct(other), 0.0))
    return parts
