"""phaseprof's totals against the same totals recomputed from the raw events with plain gzip + json.

On the committed cut-down traces (always) and on every public trace (``public`` tier): GPU busy time (union of
kernel, memcpy and memset intervals), kernel / memcpy / memset counts, and host launch calls by API.
"""

from __future__ import annotations

import math
from collections import Counter
from functools import lru_cache
from pathlib import Path

import pytest

from phaseprof.analysis.pipeline import analyze_trace
from phaseprof.analysis.results import Breakdown

from .facts import RawTotals, fixture_files, raw_totals


@lru_cache(maxsize=4)
def _both(path: Path) -> tuple[Breakdown, RawTotals]:
    return analyze_trace(path), raw_totals(path)


def _check_totals(path: Path) -> None:
    bd, raw = _both(path)
    n_gpu = sum(raw.counts.values())
    # Interval ends may round to the nearest ns differently from phaseprof's (other origin): allow 10 ns.
    assert math.isclose(bd.totals["gpu_busy_us"], raw.gpu_busy_us, abs_tol=0.01, rel_tol=0), \
        f"GPU busy {bd.totals['gpu_busy_us']} us, raw events say {raw.gpu_busy_us} us"
    assert bd.totals["kernels"] == raw.counts["kernel"]
    assert bd.totals["gpu_activities"] == n_gpu


def _check_step_counts(path: Path, *, steps_cover_trace: bool) -> None:
    """Per-step counts summed over steps: equal to the raw counts when the steps cover the whole trace,
    never more than them otherwise."""
    bd, raw = _both(path)
    if bd.trace.device != "gpu":
        return
    launches: Counter = Counter()
    for s in bd.steps:
        launches.update(s.launches.by_api)
    summed = {"kernel": sum(s.kernels for s in bd.steps), "memcpy": sum(s.memcpy_count for s in bd.steps),
              "memset": sum(s.memset_count for s in bd.steps)}
    for api, n in launches.items():
        assert api in raw.runtime_calls, f"phaseprof counts {api} launches the trace does not have"
        assert n <= raw.runtime_calls[api], f"{api}: {n} launches in steps, {raw.runtime_calls[api]} in the trace"
    for kind, n in summed.items():
        assert n <= raw.counts[kind], f"{kind}: {n} in steps, {raw.counts[kind]} in the trace"
    if steps_cover_trace:
        assert summed == {k: raw.counts[k] for k in summed}
        for api in launches:
            assert launches[api] == raw.runtime_calls[api], f"{api}: {launches[api]} vs raw {raw.runtime_calls[api]}"
        # Every launch-like call of the trace is counted under its own name.
        for api in ("cudaGraphLaunch", "hipGraphLaunch", "cudaLaunchKernel", "hipLaunchKernel", "cuLaunchKernel",
                    "cudaLaunchKernelExC", "cuLaunchKernelEx", "hipExtModuleLaunchKernel", "hipModuleLaunchKernel"):
            assert launches.get(api, 0) == raw.runtime_calls.get(api, 0), api


@pytest.mark.parametrize("trace", fixture_files(), ids=lambda p: p.name.split(".json")[0])
def test_fixture_totals_match_raw_events(trace: Path) -> None:
    _check_totals(trace)
    # The fixtures were cut at step boundaries (or hold one open-ended step), so the steps cover every event.
    _check_step_counts(trace, steps_cover_trace=True)


def test_public_totals_match_raw_events(public_trace: Path) -> None:
    _check_totals(public_trace)
    _check_step_counts(public_trace, steps_cover_trace=False)
