"""An independent reading of a Kineto trace for the H200 capture tests: plain gzip + json, no phaseprof code.

Timestamps are parsed as decimals (``parse_float=Decimal``), so every ``ts``/``dur`` becomes an exact integer
number of nanoseconds; busy unions and overlap shares are computed with integers and fractions. phaseprof reads
the same numbers as float64, whose resolution at ~5.2e12 us (the captures' clock) is about 1 ns, so comparisons
with its breakdown allow a few ns per step (``NS_SLACK``).

The rules, written from the README's definitions rather than from phaseprof's code:

- a step is one ``phaseprof_step#i_context_n(T)_generation_m(G)`` CPU ``user_annotation`` ``[ts, ts + dur)``;
- a host call (``cuda_runtime``/``cuda_driver`` event) belongs to the step whose marker contains its start;
- a GPU activity (``kernel``, ``gpu_memcpy``, ``gpu_memset``) belongs to the step of the host call with the same
  ``correlation`` id (for graph replays: the ``cudaGraphLaunch``);
- a *launch call* is a host call whose correlation id has at least one GPU activity (so the set of launch APIs is
  read off the trace, not taken from a list);
- GPU busy of a step = length of the union of its activities' intervals;
- an activity's *attributed* time: every elementary segment between interval boundaries is split equally among
  the in-step activities running in it (the README's "kernels that overlap on different streams split their
  common time equally").
"""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from functools import lru_cache
from collections.abc import Callable
from pathlib import Path

MARKER = re.compile(r"^phaseprof_step#(\d+)_context_(\d+)\((\d+)\)_generation_(\d+)\((\d+)\)$")
GPU_CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
HOST_CATS = {"cuda_runtime", "cuda_driver"}
#: Allowed |phaseprof - raw| per step or per kernel total, in ns (float64 timestamps, ~1 ns resolution each).
NS_SLACK = 20


def _ns(x) -> int:
    v = Decimal(x) * 1000
    if v != v.to_integral_value():
        raise ValueError(f"timestamp {x} us is not a whole number of ns")
    return int(v)


@dataclass(frozen=True)
class Activity:
    uid: int  # position among the file's GPU activities (identical events stay distinct)
    kind: str  # kernel / memcpy / memset
    name: str
    start: int  # ns
    end: int
    correlation: int
    stream: int


@dataclass
class RawStep:
    index: int
    name: str
    context_requests: int
    context_tokens: int
    generation_requests: int
    generation_tokens: int
    start: int
    end: int
    host_calls: Counter = field(default_factory=Counter)  # every cuda_runtime/cuda_driver call by API
    launch_calls: Counter = field(default_factory=Counter)  # the calls that put work on the GPU, by API
    activities: list[Activity] = field(default_factory=list)
    busy_ns: int = 0

    @property
    def phase(self) -> str:
        if self.context_tokens and not self.generation_tokens:
            return "prefill"
        if self.generation_tokens and not self.context_tokens:
            return "decode"
        return "mixed"

    def count(self, kind: str) -> int:
        return sum(a.kind == kind for a in self.activities)

    def kernel_names(self) -> Counter:
        return Counter(a.name for a in self.activities if a.kind == "kernel")


@dataclass
class RawTrace:
    path: Path
    steps: list[RawStep]
    activities: list[Activity]  # every GPU activity in the file
    orphans: list[Activity]  # activities whose launch call lies in no step
    kernels_per_correlation: Counter  # correlation id -> number of kernels it launched
    host_call_correlations: dict[int, str]  # correlation id -> API name
    attributed: dict[Activity, Fraction]  # ns, for every in-step activity

    def phase_steps(self, phase: str) -> list[RawStep]:
        return [s for s in self.steps if s.phase == phase]


def _union_length(intervals: list[tuple[int, int]]) -> int:
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def _equal_split(acts: list[Activity]) -> dict[Activity, Fraction]:
    bounds = sorted({a.start for a in acts} | {a.end for a in acts})
    where = {b: i for i, b in enumerate(bounds)}
    delta = [0] * (len(bounds) + 1)
    for a in acts:
        delta[where[a.start]] += 1
        delta[where[a.end]] -= 1
    prefix = [Fraction(0)]
    active = 0
    for i in range(len(bounds) - 1):
        active += delta[i]
        seg = bounds[i + 1] - bounds[i]
        prefix.append(prefix[-1] + (Fraction(seg, active) if active else 0))
    return {a: prefix[where[a.end]] - prefix[where[a.start]] for a in acts}


@lru_cache(maxsize=None)
def read(path: Path) -> RawTrace:
    with gzip.open(path, "rt") as f:
        events = json.load(f, parse_float=Decimal)["traceEvents"]
    markers = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") == "user_annotation"
                      and str(e.get("name", "")).startswith("phaseprof_step#")), key=lambda e: e["ts"])
    steps = []
    for m in markers:
        g = MARKER.match(m["name"])
        assert g, f"malformed step marker {m['name']!r}"
        i, cr, ct, gr, gt = map(int, g.groups())
        start = _ns(m["ts"])
        steps.append(RawStep(i, m["name"], cr, ct, gr, gt, start, start + _ns(m["dur"])))

    def step_of(t: int) -> RawStep | None:
        hits = [s for s in steps if s.start <= t < s.end]
        assert len(hits) <= 1, f"step markers overlap at {t} ns"
        return hits[0] if hits else None

    gpu_events = [e for e in events if e.get("ph") == "X" and e.get("cat") in GPU_CATS]
    activities = [Activity(i, GPU_CATS[e["cat"]], str(e["name"]), _ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"]),
                           int(e["args"]["correlation"]), int(e["args"].get("stream", -1)))
                  for i, e in enumerate(gpu_events)]
    by_corr: dict[int, list[Activity]] = {}
    for a in activities:
        by_corr.setdefault(a.correlation, []).append(a)
    call_step: dict[int, RawStep] = {}
    host_corr: dict[int, str] = {}
    for e in events:
        if e.get("ph") != "X" or e.get("cat") not in HOST_CATS:
            continue
        corr = int(e["args"]["correlation"])
        host_corr[corr] = e["name"]
        s = step_of(_ns(e["ts"]))
        if s is None:
            continue
        s.host_calls[e["name"]] += 1
        if corr in by_corr:
            s.launch_calls[e["name"]] += 1
            call_step[corr] = s
    orphans = []
    for a in activities:
        s = call_step.get(a.correlation)
        (s.activities if s is not None else orphans).append(a)
    for s in steps:
        s.busy_ns = _union_length([(a.start, a.end) for a in s.activities])
    in_steps = [a for s in steps for a in s.activities]
    return RawTrace(path=path, steps=steps, activities=activities, orphans=orphans,
                    kernels_per_correlation=Counter(a.correlation for a in activities if a.kind == "kernel"),
                    host_call_correlations=host_corr, attributed=_equal_split(in_steps))


#: Categories of ``nn.Module:`` scopes: the Python tracer's frames, and the scopes of ``--hierarchy hooks``
#: (``cpu_op`` on torch 2.11+cu130, ``user_annotation`` on older torches).
MODULE_SCOPE_CATS = ("python_function", "cpu_op", "user_annotation")


def rmsnorm_kernel_us(path: Path, is_step: Callable[[str], bool]) -> float:
    """GPU time (us) of kernels whose launch call lies inside an ``nn.Module: *RMSNorm_N`` scope (GemmaRMSNorm;
    not RMSNormGated, GDN's gate) on the same thread, inside a step (``user_annotation`` named so that
    ``is_step(name)``); straight from the JSON."""
    ev = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    norms: dict[object, list[tuple[float, float]]] = {}
    for e in ev:
        if e.get("cat") in MODULE_SCOPE_CATS and re.fullmatch(r"nn\.Module: \w*RMSNorm_\d+", str(e.get("name"))):
            norms.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") == "user_annotation" and is_step(str(e["name"]))]
    launch = {e["args"]["correlation"]: e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")
              and "correlation" in e.get("args", {})}
    total = 0.0
    for k in ev:
        if k.get("cat") != "kernel":
            continue
        r = launch.get(k["args"].get("correlation"))
        if r is None or not any(a <= r["ts"] < b for a, b in steps):
            continue
        if any(a <= r["ts"] < b for a, b in norms.get((r["pid"], r["tid"]), [])):
            total += k["dur"]
    return total
