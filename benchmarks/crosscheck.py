"""Check phaseprof's clean TTFT against an independent clock in the same process.

For each prompt length, reps alternate between (a) phaseprof's clean TTFT (step loop, vLLM's request metrics:
``first_token_latency``) and (b) the host clock around ``LLM.generate([prompt], max_tokens=1)``; the order
flips every rep so both see the same machine conditions. ``ratio`` = median(a) / median(b): 1.00 means they
agree (target: within 3%). (b) includes ``generate``'s own input handling, so it should be slightly larger.
``paired_ratio_median`` (median of per-rep ratios) and ``min_ratio`` (ratio of the fastest reps) are less
sensitive to a busy machine.
``profile_reps`` profiled requests per length give the profiler overhead: median profiled host TTFT over the
median unprofiled host TTFT.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from phaseprof.capture.inprocess.profile import profile_request
from phaseprof.capture.inprocess.steps import make_sampling_params, no_gc
from phaseprof.capture.inprocess.timing import host_ttft_s, metrics_ttft_s, run_requests
from phaseprof.capture.shared.options import CaptureOptions, Hierarchy, Phase
from phaseprof.capture.shared.prompts import random_prompt
from phaseprof.capture.shared.timing import TimingStats, summarize

TARGET_RATIO_TOLERANCE = 0.03


@dataclass(frozen=True)
class CrossCheck:
    """One prompt length: phaseprof's TTFT, the generate() host clock, their ratio, and profiler overhead."""

    prompt_tokens: int
    phaseprof_ttft: TimingStats
    generate_host: TimingStats
    ratio: float
    paired_ratio_median: float
    min_ratio: float
    profiler_overhead: float | None
    source: str

    @property
    def within_target(self) -> bool:
        return abs(self.ratio - 1.0) <= TARGET_RATIO_TOLERANCE

    def to_dict(self) -> dict[str, Any]:
        return {"prompt_tokens": self.prompt_tokens, "phaseprof_ttft": self.phaseprof_ttft.to_dict(),
                "generate_host": self.generate_host.to_dict(), "ratio": self.ratio,
                "paired_ratio_median": self.paired_ratio_median, "min_ratio": self.min_ratio,
                "within_3pct": self.within_target,
                "profiler_overhead": self.profiler_overhead, "source": self.source}


def _generate_once(llm: Any, prompt: list[int]) -> float:
    params, _ = make_sampling_params(1)
    with no_gc():
        t0 = time.perf_counter()
        llm.generate([{"prompt_token_ids": prompt}], params, use_tqdm=False)
        return time.perf_counter() - t0


def cross_check(session: Any, lengths: list[int], *, reps: int = 10, warmup: int = 2, seed: int = 0,
                profile_reps: int = 3) -> list[CrossCheck]:
    """Run the check at each length (see the module docstring)."""
    out = []
    for n in lengths:
        prompt = random_prompt(n, vocab_size=session.vocab_size, seed=seed)
        run_requests(session, prompt_tokens=n, max_tokens=1, n=warmup, seed=seed, prefix=f"xw{n}-")
        for _ in range(warmup):
            _generate_once(session.llm, prompt)
        ours: list[float] = []
        hosts: list[float] = []
        ours_host: list[float] = []
        source = "vllm_request_metrics"
        for r in range(reps):
            pair: list[tuple[str, float]] = []
            for kind in (("ours", "gen") if r % 2 == 0 else ("gen", "ours")):
                if kind == "gen":
                    pair.append(("gen", _generate_once(session.llm, prompt)))
                else:
                    rec = run_requests(session, prompt_tokens=n, max_tokens=1, n=1, seed=seed,
                                       prefix=f"x{n}-")[0].requests[0]
                    m = metrics_ttft_s(rec)
                    if m is None:
                        source = "host_clock"
                    h = host_ttft_s(rec)
                    ours_host.append(h or 0.0)
                    pair.append(("ours", m if m is not None else (h or 0.0)))
            d = dict(pair)
            ours.append(d["ours"])
            hosts.append(d["gen"])
        profiled: list[float] = []
        for _ in range(profile_reps):
            with tempfile.TemporaryDirectory(prefix="phaseprof-xcheck-") as work:
                req = CaptureOptions(phase=Phase.PREFILL, prompt_tokens=n, seed=seed, hierarchy=Hierarchy.OFF)
                prof = profile_request(session, req, workdir=Path(work))
            if prof.host_s is not None:
                profiled.append(prof.host_s)
        overhead = float(np.median(profiled)) / float(np.median(ours_host)) if profiled else None
        a, b = summarize(ours), summarize(hosts)
        out.append(CrossCheck(prompt_tokens=n, phaseprof_ttft=a, generate_host=b, ratio=a.median_ms / b.median_ms,
                              paired_ratio_median=float(np.median(np.array(ours) / np.array(hosts))),
                              min_ratio=a.min_ms / b.min_ms,
                              profiler_overhead=overhead, source=source))
    return out
