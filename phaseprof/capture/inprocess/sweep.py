"""Sweeps on one in-process engine: TTFT over prompt lengths (prefill) or TPOT and throughput over concurrency
(decode); what each point means is in ``shared/sweep.py``."""

from __future__ import annotations

import time
from typing import Any

from phaseprof.capture.inprocess.steps import RequestRecord
from phaseprof.capture.inprocess.timing import (
    host_tpot_s,
    host_ttft_s,
    metrics_tpot_s,
    metrics_ttft_s,
    run_requests,
    timing_from_runs,
)
from phaseprof.capture.shared.options import Phase
from phaseprof.capture.shared.serving import RequestTimes, gaps, serving_metrics
from phaseprof.capture.shared.sweep import DecodePoint, PrefillPoint, spread, world_size_of
from phaseprof.capture.shared.timing import summarize


def request_times(rec: RequestRecord, *, use_metrics: bool) -> RequestTimes:
    """One in-process request on one clock per point: vLLM's metrics for TTFT and TPOT when every request has
    them (``use_metrics``), else the host clock; ITL and throughput always on the host clock."""
    ttft = metrics_ttft_s(rec) if use_metrics else host_ttft_s(rec)
    tpot = metrics_tpot_s(rec) if use_metrics else host_tpot_s(rec)
    return RequestTimes(t_send_s=rec.t_add_s, t_done_s=rec.t_done_s, ttft_s=ttft, tpot_s=tpot,
                        itl_s=gaps(rec.token_t_s), prompt_tokens=rec.prompt_tokens,
                        output_tokens=rec.num_output_tokens)


def _out_of_time(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() > deadline


def prefill_sweep(session: Any, lengths: list[int], *, reps: int, warmup: int, seed: int = 0,
                  deadline: float | None = None, on_point: Any = None) -> tuple[list[PrefillPoint], list[int]]:
    """TTFT at each length. Returns (points, skipped lengths); lengths are skipped once ``deadline``
    (time.monotonic()) has passed."""
    points: list[PrefillPoint] = []
    skipped: list[int] = []
    for n in lengths:
        if _out_of_time(deadline):
            skipped.append(n)
            continue
        run_requests(session, prompt_tokens=n, max_tokens=1, n=warmup, seed=seed, prefix=f"sw{n}-")
        runs = run_requests(session, prompt_tokens=n, max_tokens=1, n=reps, seed=seed, prefix=f"s{n}-")
        t = timing_from_runs(runs, phase=Phase.PREFILL, prompt_tokens=n, output_tokens=1, warmup=warmup)
        point = PrefillPoint(prompt_tokens=n, ttft=t.ttft, ttft_host=t.ttft_host, source=t.source)
        points.append(point)
        if on_point is not None:
            on_point(point)
    return points, skipped


def decode_sweep(session: Any, concurrency: list[int], *, prompt_tokens: int, output_tokens: int, reps: int,
                 warmup: int, seed: int = 0, deadline: float | None = None,
                 on_point: Any = None) -> tuple[list[DecodePoint], list[int]]:
    """TPOT and output throughput at each concurrency. Returns (points, skipped concurrencies)."""
    if output_tokens < 2:
        raise ValueError("a decode sweep needs --output-tokens >= 2")
    points: list[DecodePoint] = []
    skipped: list[int] = []
    for c in concurrency:
        if _out_of_time(deadline):
            skipped.append(c)
            continue
        run_requests(session, prompt_tokens=prompt_tokens, max_tokens=output_tokens, n=warmup, seed=seed,
                     concurrency=c, prefix=f"dw{c}-")
        runs = run_requests(session, prompt_tokens=prompt_tokens, max_tokens=output_tokens, n=reps, seed=seed,
                            concurrency=c, prefix=f"d{c}-")
        recs = [rec for r in runs for rec in r.requests]
        m = [metrics_tpot_s(r) for r in recs]
        use_metrics = all(v is not None for v in m) and all(metrics_ttft_s(r) is not None for r in recs)
        tpots = [v for v in (m if use_metrics else [host_tpot_s(r) for r in recs]) if v is not None]
        tpot = summarize(tpots)
        rates = []
        for r in runs:
            done = [q.t_done_s for q in r.requests if q.t_done_s is not None]
            start = min(q.t_add_s for q in r.requests)
            if done:
                rates.append(c * output_tokens / (max(done) - start))
        source = "vllm_request_metrics" if use_metrics else "host_clock"
        serving = serving_metrics([[request_times(q, use_metrics=use_metrics) for q in r.requests] for r in runs],
                                  concurrency=c, prompt_tokens=prompt_tokens, output_tokens=output_tokens,
                                  world_size=world_size_of(session.plan.kwargs), latency_source=source)
        point = DecodePoint(concurrency=c, prompt_tokens=prompt_tokens, output_tokens=output_tokens, tpot=tpot,
                            output_tok_per_s=spread(rates), decode_tok_per_s=c / (tpot.median_ms / 1e3),
                            source=source, serving=serving,
                            timing=timing_from_runs(runs, phase=Phase.DECODE, prompt_tokens=prompt_tokens,
                                                    output_tokens=output_tokens, warmup=warmup))
        points.append(point)
        if on_point is not None:
            on_point(point)
    return points, skipped
