"""Seeded token-id completions against a live server: rounds of concurrent streamed requests, and their timing.

Every request gets its own prompt (``random_prompt`` seeded with seed + request index): a serving engine usually
has prefix caching on, and repeating one prompt would time cache hits instead of prefills.
"""

from __future__ import annotations

import itertools
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from phaseprof.capture.server.client import ServerClient, StreamedRequest
from phaseprof.capture.shared.options import Phase
from phaseprof.capture.shared.prompts import random_prompt
from phaseprof.capture.shared.timing import PhaseTiming, summarize

CLIENT_CLOCK = "client_stream"  # PhaseTiming.source of server captures: chunk arrival times on this host


@dataclass
class RequestPlan:
    """What each completion asks for. ``counter`` numbers requests so each gets a distinct seeded prompt."""

    model: str
    prompt_tokens: int
    max_tokens: int
    vocab_size: int
    seed: int = 0
    counter: itertools.count = field(default_factory=itertools.count)

    def body(self) -> dict[str, Any]:
        k = next(self.counter)
        return {
            "model": self.model,
            "prompt": random_prompt(self.prompt_tokens, vocab_size=self.vocab_size, seed=self.seed + k),
            # min_tokens + ignore_eos: exactly max_tokens tokens, whatever the (dummy or real) weights sample.
            "max_tokens": self.max_tokens, "min_tokens": self.max_tokens, "ignore_eos": True,
            "temperature": 0.0, "seed": self.seed, "return_token_ids": True,
            "stream_options": {"include_usage": True},
        }


def run_round(client: ServerClient, plan: RequestPlan, concurrency: int) -> list[StreamedRequest]:
    """``concurrency`` streamed requests sent at once (one thread each); returns when all have finished."""
    bodies = [plan.body() for _ in range(concurrency)]
    if concurrency == 1:
        return [client.stream_completion(bodies[0])]
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        return list(pool.map(client.stream_completion, bodies))


def run_rounds(client: ServerClient, plan: RequestPlan, *, rounds: int,
               concurrency: int) -> list[list[StreamedRequest]]:
    return [run_round(client, plan, concurrency) for _ in range(rounds)]


def timing_from_streams(rounds: list[list[StreamedRequest]], *, phase: Phase, prompt_tokens: int,
                        output_tokens: int, warmup: int) -> PhaseTiming:
    """Clean timing from streamed requests (client clock, every request of every round).

    TTFT = first token chunk - send; TPOT = mean inter-token time after the first token (see StreamedRequest).
    The ``*_host`` fields hold the same numbers: there is no second clock on the client side.
    """
    reqs = [r for rnd in rounds for r in rnd]
    ttft = summarize([t for r in reqs if (t := r.ttft_s) is not None])
    tpot = None
    if phase is Phase.DECODE:
        vals = [t for r in reqs if (t := r.tpot_s) is not None]
        tpot = summarize(vals) if vals else None
    return PhaseTiming(phase=phase, prompt_tokens=prompt_tokens, output_tokens=output_tokens, reps=len(rounds),
                       warmup=warmup, source=CLIENT_CLOCK, ttft=ttft, ttft_host=ttft, tpot=tpot, tpot_host=tpot,
                       step_host_ms=())


def round_throughput(rnd: list[StreamedRequest]) -> float | None:
    """Output tokens per second of one round: all tokens / (last token - first send)."""
    done = [r.t_done_s for r in rnd if r.t_done_s is not None]
    if not done:
        return None
    span = max(done) - min(r.t_send_s for r in rnd)
    return sum(r.output_tokens for r in rnd) / span if span > 0 else None
