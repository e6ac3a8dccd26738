"""Serving metrics of one concurrency point from its requests' timings (in-process or through a server).

Both engines reduce their requests to ``RequestTimes`` (one clock per point: vLLM's engine-core timestamps
where it gives them, else the host or client clock) and ``serving_metrics`` computes every number of
``pareto.records.ServingMetrics`` the same way for both.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from phaseprof.pareto.records import Percentiles, ServingMetrics


@dataclass(frozen=True)
class RequestTimes:
    """One request of a round. Seconds on one clock: ``t_send_s`` request sent / added, ``t_done_s`` last
    token; ``ttft_s`` / ``tpot_s`` as in ``capture.inprocess.timing`` (None when unknown); ``itl_s``: gaps between
    consecutive token arrivals; token counts of the prompt and the output."""

    t_send_s: float
    t_done_s: float | None
    ttft_s: float | None
    tpot_s: float | None
    itl_s: tuple[float, ...]
    prompt_tokens: int
    output_tokens: int


def percentiles(values_s: list[float]) -> Percentiles:
    """p50, p90, p99 and mean in ms of values in seconds (at least one value)."""
    ms = np.asarray(values_s, dtype=float) * 1e3
    p50, p90, p99 = np.percentile(ms, [50, 90, 99])
    return Percentiles(p50_ms=float(p50), p90_ms=float(p90), p99_ms=float(p99), mean_ms=float(ms.mean()),
                       n=int(ms.size))


def gaps(times_s: list[float] | tuple[float, ...]) -> tuple[float, ...]:
    """Differences between consecutive arrival times."""
    return tuple(float(b - a) for a, b in zip(times_s, times_s[1:]))


def _round_rates(rnd: list[RequestTimes]) -> tuple[float, float, float] | None:
    done = [r.t_done_s for r in rnd if r.t_done_s is not None]
    if not done:
        return None
    wall = max(done) - min(r.t_send_s for r in rnd)
    if wall <= 0:
        return None
    out = sum(r.output_tokens for r in rnd)
    total = out + sum(r.prompt_tokens for r in rnd)
    return len(rnd) / wall, out / wall, total / wall


def serving_metrics(rounds: list[list[RequestTimes]], *, concurrency: int, prompt_tokens: int,
                    output_tokens: int, world_size: int, latency_source: str) -> ServingMetrics:
    """Every ``ServingMetrics`` number of a point (see its docstring). Raises ValueError when no request of
    any round produced a TTFT and a TPOT (nothing to report)."""
    reqs = [r for rnd in rounds for r in rnd]
    ttft = [r.ttft_s for r in reqs if r.ttft_s is not None]
    tpot = [r.tpot_s for r in reqs if r.tpot_s is not None]
    if not ttft or not tpot:
        raise ValueError("no request produced a TTFT and a TPOT")
    itl = [g for r in reqs for g in r.itl_s]
    rates = [x for rnd in rounds if (x := _round_rates(rnd)) is not None]
    if not rates:
        raise ValueError("no round finished")
    req_s, out_s, total_s = (float(np.median([x[i] for x in rates])) for i in range(3))
    world = max(int(world_size), 1)
    tp = percentiles(tpot)
    return ServingMetrics(
        concurrency=concurrency, rounds=len(rounds), prompt_tokens=prompt_tokens, output_tokens=output_tokens,
        ttft=percentiles(ttft), tpot=tp, itl=percentiles(itl) if itl else None, latency_source=latency_source,
        request_per_s=req_s, output_tok_per_s=out_s, total_tok_per_s=total_s, world_size=world,
        tps_per_gpu=total_s / world, output_tps_per_gpu=out_s / world, tps_per_user=1e3 / tp.p50_ms)
