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
from dataclasses import dataclass

import numpy as np

from phaseprof.capture.options import Phase
from phaseprof.capture.progress import Stages, quiet_stages
from phaseprof.capture.steps import DriveResult, RequestRecord, drive_requests, no_gc, random_prompt


@dataclass(frozen=True)
class TimingStats:
    """Distribution of one timing over reps, in milliseconds: median, 10th and 90th percentile (linear)."""

    median_ms: float
    p10_ms: float
    p90_ms: float
    min_ms: float
    max_ms: float
    n: int
    values_ms: tuple[float, ...]

    def to_dict(self) -> dict[str, object]:
        return {"median_ms": self.median_ms, "p10_ms": self.p10_ms, "p90_ms": self.p90_ms, "min_ms": self.min_ms,
                "max_ms": self.max_ms, "n": self.n, "values_ms": list(self.values_ms)}


#: The name this type had before ``analysis.results.Stats`` (per-step statistics) made it ambiguous.
Stats = TimingStats


def summarize(values_s: list[float]) -> TimingStats:
    """TimingStats of values given in seconds (reported in ms)."""
    if not values_s:
        raise ValueError("no values to summarize")
    ms = np.asarray(values_s, dtype=float) * 1e3
    p10, p50, p90 = np.percentile(ms, [10, 50, 90])
    return TimingStats(median_ms=float(p50), p10_ms=float(p10), p90_ms=float(p90), min_ms=float(ms.min()),
                 max_ms=float(ms.max()), n=len(ms), values_ms=tuple(round(float(v), 4) for v in ms))


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


@dataclass(frozen=True)
class PhaseTiming:
    """Clean timing of ``reps`` identical requests (``warmup`` untimed ones ran first).

    ``ttft``/``tpot`` come from ``source`` ("vllm_request_metrics" or "host_clock"); ``*_host`` always from the
    host clock. ``tpot`` is None for prefill (one generated token). ``step_host_ms``: median host time of
    ``LLMEngine.step()`` per step index across reps (the shape of one request).
    """

    phase: Phase
    prompt_tokens: int
    output_tokens: int
    reps: int
    warmup: int
    source: str
    ttft: TimingStats
    ttft_host: TimingStats
    tpot: TimingStats | None
    tpot_host: TimingStats | None
    step_host_ms: tuple[float, ...]

    @property
    def headline(self) -> TimingStats:
        """TTFT for prefill, TPOT for decode."""
        if self.phase is Phase.DECODE and self.tpot is not None:
            return self.tpot
        return self.ttft

    @property
    def headline_host(self) -> TimingStats:
        if self.phase is Phase.DECODE and self.tpot_host is not None:
            return self.tpot_host
        return self.ttft_host

    def to_dict(self) -> dict[str, object]:
        return {
            "phase": str(self.phase), "prompt_tokens": self.prompt_tokens, "output_tokens": self.output_tokens,
            "reps": self.reps, "warmup": self.warmup, "source": self.source,
            "headline_metric": "tpot" if self.phase is Phase.DECODE else "ttft",
            "ttft": self.ttft.to_dict(), "ttft_host": self.ttft_host.to_dict(),
            "tpot": self.tpot.to_dict() if self.tpot else None,
            "tpot_host": self.tpot_host.to_dict() if self.tpot_host else None,
            "step_host_ms": list(self.step_host_ms),
        }


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


def time_phase(session: object, *, phase: Phase, prompt_tokens: int, output_tokens: int, reps: int, warmup: int,
               seed: int = 0, stages: Stages | None = None, concurrency: int = 1) -> PhaseTiming:
    """Warm up, then time ``reps`` rounds of ``concurrency`` requests without the profiler (``stages``:
    progress display)."""
    max_tokens = 1 if phase is Phase.PREFILL else output_tokens
    stages = stages or quiet_stages()
    with stages.stage("warm-up requests", total=warmup) as update:
        run_requests(session, prompt_tokens=prompt_tokens, max_tokens=max_tokens, n=warmup, seed=seed, prefix="w",
                     concurrency=concurrency, on_done=lambda k: update(done=k))
    with stages.stage("timed requests (no profiler)", total=reps) as update:
        runs = run_requests(session, prompt_tokens=prompt_tokens, max_tokens=max_tokens, n=reps, seed=seed,
                            concurrency=concurrency, on_done=lambda k: update(done=k))
    return timing_from_runs(runs, phase=phase, prompt_tokens=prompt_tokens, output_tokens=max_tokens,
                            warmup=warmup)


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
