"""Checks every Breakdown passes before it is shown or written: a failed one is an error, never a silent number.

What must hold (times in µs; ``TOLERANCE_US`` absorbs the nanosecond rounding of per-step sums):
- every number is finite;
- per step: 0 <= GPU busy <= wall, 0 <= GPU idle <= wall, each idle part >= 0 and the parts sum to the idle
  time, busy % in [0, 100], and each view's bucket times sum to the step's busy time;
- per phase: busy <= wall, each view's bucket times sum to the phase's busy time;
- whole trace: busy inside steps <= GPU busy.
Hostile input that slips past the loader's range checks (e.g. timestamps that are valid numbers but mutually
absurd) lands here instead of in a table with a negative idle time.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from operator import attrgetter

import numpy as np

from phaseprof.analysis.results import Breakdown
from phaseprof.errors import TraceError

#: Absolute slack per comparison, µs, plus a relative part for long sums (float addition of many items).
TOLERANCE_US = 0.01
_REL = 1e-9


def _close_or_below(a, b):  # noqa: ANN001, ANN202 (floats, or arrays of them)
    return a <= b + TOLERANCE_US + _REL * abs(b)


def _close(a, b):  # noqa: ANN001, ANN202 (floats, or arrays of them)
    return abs(a - b) <= TOLERANCE_US + _REL * np.maximum(abs(a), abs(b))


def broken_invariants(bd: Breakdown) -> list[str]:
    """Every invariant ``bd`` breaks, as short phrases (empty when all hold)."""
    bad: list[str] = []
    if not _all_finite(bd):
        bad = [f"{key} is {v}" for key, v in _numbers(bd) if not math.isfinite(v)]
    if bad:
        return bad
    for r in (bd.steps if _steps_may_break(bd) else ()):
        where = f"step {r.index}"
        parts = (r.idle.launch_overhead_us, r.idle.host_work_us, r.idle.other_us)
        if not (r.gpu_busy_us >= 0 and _close_or_below(r.gpu_busy_us, r.wall_us)):
            bad.append(f"{where}: busy {r.gpu_busy_us:.3f} outside 0..wall {r.wall_us:.3f}")
        if not (_close_or_below(0.0, r.gpu_idle_us) and _close_or_below(r.gpu_idle_us, r.wall_us)):
            bad.append(f"{where}: idle {r.gpu_idle_us:.3f} outside 0..wall {r.wall_us:.3f}")
        if min(parts) < -TOLERANCE_US:
            bad.append(f"{where}: a negative idle part {parts}")
        if not _close(sum(parts), r.gpu_idle_us):
            bad.append(f"{where}: idle parts sum to {sum(parts):.3f}, idle is {r.gpu_idle_us:.3f}")
        if not -TOLERANCE_US <= r.busy_pct <= 100 + TOLERANCE_US:
            bad.append(f"{where}: busy {r.busy_pct:.3f} %")
        for view, times in (("kernel", r.kernel_view_us), ("module", r.module_view_us)):
            if times and not _close(sum(times.values()), r.gpu_busy_us):
                bad.append(f"{where}: {view}-view buckets sum to {sum(times.values()):.3f}, busy is "
                           f"{r.gpu_busy_us:.3f}")
    for ph in bd.phases:
        if not _close_or_below(ph.gpu_busy_us, ph.wall_us):
            bad.append(f"{ph.phase}: busy {ph.gpu_busy_us:.3f} > wall {ph.wall_us:.3f}")
        for view, rows in (("kernel", ph.kernel_view), ("module", ph.module_view)):
            total = sum(b.time_us for b in rows)
            if rows and not _close(total, ph.gpu_busy_us):
                bad.append(f"{ph.phase}: {view}-view buckets sum to {total:.3f}, busy is {ph.gpu_busy_us:.3f}")
    t = bd.totals
    if not _close_or_below(t.get("in_steps_busy_us", 0.0), t.get("gpu_busy_us", 0.0)):
        bad.append(f"busy inside steps {t['in_steps_busy_us']:.3f} > GPU busy {t['gpu_busy_us']:.3f}")
    return bad


def checked(bd: Breakdown) -> Breakdown:
    """``bd`` if every invariant holds, else a TraceError naming the trace and the first broken one."""
    bad = broken_invariants(bd)
    if bad:
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise TraceError(f"the breakdown fails a consistency check, so no number is shown: {bad[0]}{more}; the "
                         f"trace's times contradict each other", path=bd.trace.path)
    return bd


def _steps_may_break(bd: Breakdown) -> bool:
    """Whether a step row may break a per-step invariant: the same comparisons as the loop in
    :func:`broken_invariants` (the same float operations, so the same outcome), on every step at once. The loop,
    which words what broke, runs only when one does (a loop over every step ran for minutes at 200k steps)."""
    if not bd.steps:
        return False
    col = {k: np.fromiter(map(attrgetter(k), bd.steps), dtype=np.float64, count=len(bd.steps)) for k in (
        "gpu_busy_us", "wall_us", "gpu_idle_us", "busy_pct", "idle.launch_overhead_us", "idle.host_work_us",
        "idle.other_us")}
    busy, wall, idle, pct = col["gpu_busy_us"], col["wall_us"], col["gpu_idle_us"], col["busy_pct"]
    parts = (col["idle.launch_overhead_us"], col["idle.host_work_us"], col["idle.other_us"])
    ok = (busy >= 0) & _close_or_below(busy, wall) & _close_or_below(0.0, idle) & _close_or_below(idle, wall)
    ok &= np.minimum(np.minimum(parts[0], parts[1]), parts[2]) >= -TOLERANCE_US
    ok &= _close((parts[0] + parts[1]) + parts[2], idle) & (-TOLERANCE_US <= pct) & (pct <= 100 + TOLERANCE_US)
    for view in ("kernel_view_us", "module_view_us"):
        sums = [sum(getattr(r, view).values()) if getattr(r, view) else None for r in bd.steps]
        has = np.array([x is not None for x in sums], dtype=bool)
        ok &= ~has | _close(np.array([0.0 if x is None else x for x in sums], dtype=np.float64), busy)
    return not bool(ok.all())


_STEP_NUMBERS = ("wall_us", "gpu_busy_us", "gpu_idle_us", "busy_pct", "start_us", "idle.launch_overhead_us",
                 "idle.host_work_us", "idle.other_us")


def _all_finite(bd: Breakdown) -> bool:
    """Whether every number :func:`_numbers` names is finite, each step column tested at once (200k steps)."""
    if not all(map(math.isfinite, (v for _, v in _numbers(dataclasses.replace(bd, steps=[]))))):
        return False
    return all(bool(np.isfinite(np.fromiter(map(attrgetter(k), bd.steps), dtype=np.float64,
                                            count=len(bd.steps))).all()) for k in _STEP_NUMBERS)


def _numbers(bd: Breakdown) -> Iterable[tuple[str, float]]:
    for k, v in bd.totals.items():
        yield f"totals.{k}", v
    for r in bd.steps:
        for k in ("wall_us", "gpu_busy_us", "gpu_idle_us", "busy_pct", "start_us"):
            yield f"step {r.index} {k}", getattr(r, k)
        yield from ((f"step {r.index} idle", x) for x in (r.idle.launch_overhead_us, r.idle.host_work_us,
                                                           r.idle.other_us))
    for ph in bd.phases:
        yield from ((f"{ph.phase} {b.bucket}", b.time_us) for b in (*ph.kernel_view, *ph.module_view))
