"""The numbers a one-minute report shows, read off a phase summary: per-step means and the top kernels.

Computed here (the analysis layer) so the terminal, markdown and dashboard renderers only format them.
"""

from __future__ import annotations

from dataclasses import dataclass

from phaseprof.analysis.results import KernelStat, PhaseSummary

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
