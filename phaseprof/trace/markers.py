"""Step annotations phaseprof recognises, and the one its own capture writes.

vLLM (gpu_worker.py) writes, per engine step, one of
  ``execute_context_1(4096)_generation_0(0)``
  ``execute_4096_context_1(sq4096sk4096sqsq..sqsk..)_generation_0(sq0sk0sqsq0sqsk0)``
torch.profiler's schedule writes ``ProfilerStep#N``; phaseprof's capture writes
``phaseprof_step#<i>_context_<n>(<tokens>)_generation_<m>(<tokens>)`` around each ``engine.step()``.
Numbers are ASCII digits, at most 18 of them (an int64, and JSON-safe): an annotation with a longer or
non-ASCII number is no step marker any of these writes, so it is not read as one (its time stays in the trace).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PHASEPROF_STEP_PREFIX = "phaseprof_step#"

# Some vLLM builds append the squared token count: ``execute_context_1(888_788544)_generation_0(0)``.
_N = "([0-9]{1,18})"  # a number we read: ASCII, fits int64
_D = "[0-9]{1,40}"  # a number we skip (vLLM's squared counts)
_VLLM_SHORT = re.compile(rf"^execute_context_{_N}\({_N}(?:_{_D})?\)_generation_{_N}\({_N}(?:_{_D})?\)$")
_VLLM_LONG = re.compile(
    rf"^execute_{_N}_context_{_N}\(sq{_N}sk{_D}sqsq{_D}sqsk{_D}\)_generation_{_N}\(sq{_N}sk{_D}sqsq{_D}sqsk{_D}\)$"
)
_PHASEPROF = re.compile(rf"^phaseprof_step#{_N}_context_{_N}\({_N}\)_generation_{_N}\({_N}\)$")
_PROFILER_STEP = re.compile(rf"^ProfilerStep#{_N}$")


@dataclass(frozen=True, slots=True)
class StepMarker:
    """What one step annotation says. Token counts are None when the marker does not carry them."""

    source: str  # "phaseprof" | "vllm" | "profiler_step"
    index: int | None
    context_requests: int | None
    context_tokens: int | None
    generation_requests: int | None
    generation_tokens: int | None


def phaseprof_step_name(index: int, context_requests: int, context_tokens: int,
                        generation_requests: int, generation_tokens: int) -> str:
    """The record_function name phaseprof's capture wraps around engine step ``index``."""
    return (f"{PHASEPROF_STEP_PREFIX}{index}_context_{context_requests}({context_tokens})"
            f"_generation_{generation_requests}({generation_tokens})")


def parse_step_marker(name: str) -> StepMarker | None:
    """Parse an annotation name into a StepMarker, or None if it is not a step annotation."""
    if m := _PHASEPROF.match(name):
        i, cr, ct, gr, gt = map(int, m.groups())
        return StepMarker("phaseprof", i, cr, ct, gr, gt)
    if m := _VLLM_SHORT.match(name):
        cr, ct, gr, gt = map(int, m.groups())
        return StepMarker("vllm", None, cr, ct, gr, gt)
    if m := _VLLM_LONG.match(name):
        _total, cr, ct, gr, gt = map(int, m.groups())
        return StepMarker("vllm", None, cr, ct, gr, gt)
    if m := _PROFILER_STEP.match(name):
        return StepMarker("profiler_step", int(m.group(1)), None, None, None, None)
    return None
