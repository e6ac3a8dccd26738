"""Clean (unprofiled) timing of one phase: TTFT for prefill, TPOT for decode, over ``reps`` requests.

Definitions (all per request, concurrency 1 unless a sweep says otherwise):
- TTFT from vLLM's metrics = ``RequestStateStats.first_token_latency``: wall time from the request's arrival
  (``add_request``) until the engine front-end processed its first token. Host TTFT = perf_counter from just
  before ``add_request`` to just after the ``step()`` that returned the first token.
- TPOT from vLLM's metrics = (``last_token_ts`` - ``first_token_ts``) / (generated tokens - 1), engine-core
  monotonic timestamps: the mean time per output token after the first. Host TPOT = same span on perf_counter.
The headline uses vLLM's metrics when every rep has them (capability check on the objects, never the version),
else the host clock; both are always recorded.
"""

from __future__ import annotations

from collections.abc import Callable
import numpy as np

from phaseprof.capture.inprocess.progress import Stages, quiet_stages
from phaseprof.capture.inprocess.steps import DriveResult, RequestRecord, drive_requests, no_gc
from phaseprof.capture.shared.options import CaptureOptions, Phase
from phaseprof.capture.shared.prompts import random_prompt
from phaseprof.capture.shared.timing import PhaseTiming, summarize


def metrics_ttft_s(rec: RequestRecord) -> float | None:
    """TTFT from vLLM's RequestStateStats, if this vLLM provides it."""
    m = rec.metrics
    value = getattr(m, "first_token_latency", None) if m is not None else None
    return float(value) if value else None


def metrics_tpot_s(rec: RequestRecord) -> float | None:
    """TPOT from vLLM's RequestStateStats engine-core timestamps, if present and >1 token was generated."""
    m = rec.metrics
    if m is None or not all(hasattr(m, a) for a in ("first_token_ts", "last_token_ts", "num_generation_tokens")):
        return None
    n = int(m.num_generation_tokens)
    if n < 2 or not m.first_token_ts or not m.last_token_ts:
        return None
    return (float(m.last_token_ts) - float(m.first_token_ts)) / (n - 1)


def host_ttft_s(rec: RequestRecord) -> float | None:
    return None if rec.t_first_token_s is None else rec.t_first_token_s - rec.t_add_s


def host_tpot_s(rec: RequestRecord) -> float | None:
    n = rec.num_output_tokens
    if rec.t_first_token_s is None or rec.t_done_s is None or n < 2:
        return None
    return (rec.t_done_s - rec.t_first_token_s) / (n - 1)


def run_requests(session: object, *, prompt_tokens: int, max_tokens: int, n: int, seed: int,
                 concurrency: int = 1, prefix: str = "t",
                 on_done: Callable[[int], None] | None = None) -> list[DriveResult]:
    """Run ``n`` rounds of ``concurrency`` simultaneous requests (GC paused inside each round).

    ``on_done(k)`` is called after round k (1-based) finished, outside the timed part (progress display)."""
    vocab = session.vocab_size  # type: ignore[attr-defined]
    out = []
    for r in range(n):
        prompts = [random_prompt(prompt_tokens, vocab_size=vocab, seed=seed + k) for k in range(concurrency)]
        with no_gc():
            out.append(drive_requests(session, prompts, max_tokens, prefix=f"{prefix}{r}"))
        if on_done is not None:
            on_done(r + 1)
    return out


def time_phase(session: object, req: CaptureOptions, *, stages: Stages | None = None) -> PhaseTiming:
    """Warm up, then time ``req.reps`` rounds of ``req.concurrency`` requests without the profiler (``stages``:
    progress display)."""
    stages = stages or quiet_stages()
    with stages.stage("warm-up requests", total=req.warmup) as update:
        run_requests(session, prompt_tokens=req.prompt_tokens, max_tokens=req.max_tokens, n=req.warmup,
                     seed=req.seed, prefix="w", concurrency=req.concurrency, on_done=lambda k: update(done=k))
    with stages.stage("timed requests (no profiler)", total=req.reps) as update:
        runs = run_requests(session, prompt_tokens=req.prompt_tokens, max_tokens=req.max_tokens, n=req.reps,
                            seed=req.seed, concurrency=req.concurrency, on_done=lambda k: update(done=k))
    return timing_from_runs(runs, phase=req.phase, prompt_tokens=req.prompt_tokens, output_tokens=req.max_tokens,
                            warmup=req.warmup)


def timing_from_runs(runs: list[DriveResult], *, phase: Phase, prompt_tokens: int, output_tokens: int,
                     warmup: int) -> PhaseTiming:
    """Summarize runs into a PhaseTiming (metrics when all requests have them, else host clock); every request
    of every run counts (one per run at concurrency 1)."""
    recs = [q for r in runs for q in r.requests]
    m_ttft = [metrics_ttft_s(r) for r in recs]
    h_ttft = [host_ttft_s(r) for r in recs]
    m_tpot = [metrics_tpot_s(r) for r in recs]
    h_tpot = [host_tpot_s(r) for r in recs]
    use_metrics = all(v is not None for v in m_ttft) and (
        phase is Phase.PREFILL or all(v is not None for v in m_tpot))
    h_ttft_ok = [v for v in h_ttft if v is not None]
    ttft_host = summarize(h_ttft_ok)
    ttft = summarize([v for v in m_ttft if v is not None]) if use_metrics else ttft_host
    tpot = tpot_host = None
    if phase is Phase.DECODE:
        h_ok = [v for v in h_tpot if v is not None]
        tpot_host = summarize(h_ok) if h_ok else None
        tpot = summarize([v for v in m_tpot if v is not None]) if use_metrics else tpot_host
    n_steps = min(len(r.steps) for r in runs)
    step_ms = tuple(round(float(np.median([r.steps[i].host_s for r in runs])) * 1e3, 4) for i in range(n_steps))
    return PhaseTiming(phase=phase, prompt_tokens=prompt_tokens, output_tokens=output_tokens, reps=len(runs),
                       warmup=warmup, source="vllm_request_metrics" if use_metrics else "host_clock", ttft=ttft,
                       ttft_host=ttft_host, tpot=tpot, tpot_host=tpot_host, step_host_ms=step_ms)
