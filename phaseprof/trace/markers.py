"""Step annotations phaseprof recognises, and the one its own capture writes.

vLLM (gpu_worker.py) writes, per engine step, one of
  ``execute_context_1(4096)_generation_0(0)``
  ``execute_4096_context_1(sq4096sk4096sqsq..sqsk..)_generation_0(sq0sk0sqsq0sqsk0)``
torch.profiler's schedule writes ``ProfilerStep#N``; phaseprof's capture writes
``phaseprof_step#<i>_context_<n>(<tokens>)_generation_<m>(<tokens>)`` around each ``engine.step()``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PHASEPROF_STEP_PREFIX = "phaseprof_step#"

# Some vLLM builds append the squared token count: ``execute_context_1(888_788544)_generation_0(0)``.
_VLLM_SHORT = re.compile(r"^execute_context_(\d+)\((\d+)(?:_\d+)?\)_generation_(\d+)\((\d+)(?:_\d+)?\)$")
_VLLM_LONG = re.compile(
    r"^execute_(\d+)_context_(\d+)\(sq(\d+)sk\d+sqsq\d+sqsk\d+\)_generation_(\d+)\(sq(\d+)sk\d+sqsq\d+sqsk\d+\)$"
)
_PHASEPROF = re.compile(r"^phaseprof_step#(\d+)_context_(\d+)\((\d+)\)_generation_(\d+)\((\d+)\)$")
_PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")


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
