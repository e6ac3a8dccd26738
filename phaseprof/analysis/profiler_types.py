"""The breakdown's ``profiler`` section (optional, like sol), computed by ``analysis.profiler_cost``."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class PhaseProfilerCost:
    """One phase: Python frames the stack recorder wrote in its steps (all steps together), and the host time
    that cost at the low and high per-frame cost, in µs and in % of the phase's wall."""

    phase: str
    python_frames: int
    overhead_low_us: float
    overhead_high_us: float
    overhead_low_pct: float
    overhead_high_pct: float


@dataclass(frozen=True)
class ProfilerCost:
    """The breakdown's ``profiler`` section. ``recorded_with``: the profiler settings the trace shows
    (``with_stack``, ``record_shapes``, ``profile_memory``, ``with_flops``); ``python_events``: Python frames in
    the file; ``frame_cost_us``: the per-frame cost range used; ``phases``: the estimate per phase (empty without
    stacks: nothing to estimate from)."""

    recorded_with: dict[str, bool]
    python_events: int
    frame_cost_us: tuple[float, float]
    phases: list[PhaseProfilerCost] = field(default_factory=list)

    def phase(self, name: str) -> PhaseProfilerCost | None:
        return next((p for p in self.phases if p.phase == name), None)

    def lines(self) -> list[str]:
        """What the terminal prints (one line for the settings, one per phase with stacks; none when the trace
        was recorded with none of them)."""
        on = [k for k, v in self.recorded_with.items() if v]
        if not on:
            return []
        counted = sum(p.python_frames for p in self.phases)
        kept = f"{self.python_events:,} Python frames in the file" + (
            f", numbered as {counted:,} recorded in its steps (a cut: the recorder numbers every frame it writes)"
            if counted > self.python_events else "")
        out = [f"recorded with: {', '.join(on) if on else 'no stacks, shapes, memory or flops'}"
               + (f" ({kept})" if self.recorded_with.get("with_stack") else "")]
        lo, hi = self.frame_cost_us
        for p in self.phases:
            out.append(f"profiler cost, {p.phase}: {p.python_frames:,} Python frames recorded in its steps x "
                       f"{lo:g}-{hi:g} us = {p.overhead_low_us / 1e3:.1f}-{p.overhead_high_us / 1e3:.1f} ms of host "
                       f"time ({p.overhead_low_pct:.0f}-{p.overhead_high_pct:.0f}% of the steps' wall; estimate, "
                       "the profiler's, not the server's)")
        return out
