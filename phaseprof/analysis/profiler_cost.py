"""The profiler's own host cost, estimated from the trace: what it was recorded with, and how much host time the
Python stack recorder (``with_stack``, vLLM's profiler default) added to each phase's steps.

Estimate: Python frames recorded in the phase's steps (``trace.recording``: frames present, or the span of their
ids where a trace was cut down to its module frames) x a cost per frame, as a range
(``defaults.PYTHON_FRAME_COST_US``). The range's two ends are measured on the committed H200 eager captures of the
35B-A3B preset (4,096-token prefill, decode at 4,096 context; vLLM 0.23, the same engine plan):

- low, 0.6 us: the stack recorder alone: host time of the profiled step with stacks minus with module hooks and
  no stacks (prefill 226.2 - 186.2 ms, decode 175.3 - 139.1 ms; ``traces/h200/hooks/README.md``) over the frames
  a step records with stacks (68.0k prefill, 51.2k decode: the id spans of ``traces/h200/own-eager``): 0.59 and
  0.71 us;
- high, 1.7 us: everything the profiler added, put on the frames: vLLM's own profiled step minus the same
  request's clean time (prefill 220.0 - 108.9 ms TTFT, decode 169.9 - 81.1 ms TPOT; ``traces/h200/own-eager``,
  ``result.json``) over the same frames: 1.63 and 1.73 us.

It is host time: it lengthens a step only where the host is what the GPU waits for. Graph replays hide it (the
host launches far ahead), eager and torch.compile'd steps without graphs do not, so the verdict
(``analysis.verdict``) takes it out of the host's idle time before calling a step host-bound, and says so.
Analysis only: no rendering here.
"""

from __future__ import annotations

from phaseprof.analysis.profiler_types import PhaseProfilerCost, ProfilerCost
from phaseprof.analysis.results import PhaseSummary, StepRow
from phaseprof.defaults import PYTHON_FRAME_COST_US
from phaseprof.trace.recording import Recording


def profiler_cost(rec: Recording, *, phases: list[PhaseSummary], steps: list[StepRow], origin_us: float
                  ) -> ProfilerCost:
    """The estimate for each phase of ``phases`` from its ``steps`` (``origin_us``: the trace clock of the
    steps' zero, ``TraceMeta.origin_us``)."""
    lo, hi = PYTHON_FRAME_COST_US
    out = []
    if rec.with_stack:
        for ph in phases:
            frames = sum(rec.python_frames_in(origin_us + s.start_us, origin_us + s.start_us + s.wall_us)
                         for s in steps if s.phase == ph.phase)
            wall = ph.wall_us
            out.append(PhaseProfilerCost(
                phase=ph.phase, python_frames=frames, overhead_low_us=frames * lo, overhead_high_us=frames * hi,
                overhead_low_pct=100.0 * frames * lo / wall if wall else 0.0,
                overhead_high_pct=100.0 * frames * hi / wall if wall else 0.0))
    return ProfilerCost(recorded_with=rec.settings(), python_events=rec.python_events, frame_cost_us=(lo, hi),
                        phases=out)
