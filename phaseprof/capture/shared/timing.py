"""What a clean timing reports, on either capture path: ``TimingStats`` (one distribution, ms) and
``PhaseTiming`` (one phase's TTFT/TPOT over reps; in-process from vLLM's request metrics or the host clock,
through a server on the client clock)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from phaseprof.capture.shared.options import Phase


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


def summarize(values_s: list[float]) -> TimingStats:
    """TimingStats of values given in seconds (reported in ms)."""
    if not values_s:
        raise ValueError("no values to summarize")
    ms = np.asarray(values_s, dtype=float) * 1e3
    p10, p50, p90 = np.percentile(ms, [10, 50, 90])
    return TimingStats(median_ms=float(p50), p10_ms=float(p10), p90_ms=float(p90), min_ms=float(ms.min()),
                 max_ms=float(ms.max()), n=len(ms), values_ms=tuple(round(float(v), 4) for v in ms))


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
            "headline_metric": self.phase.metric,
            "ttft": self.ttft.to_dict(), "ttft_host": self.ttft_host.to_dict(),
            "tpot": self.tpot.to_dict() if self.tpot else None,
            "tpot_host": self.tpot_host.to_dict() if self.tpot_host else None,
            "step_host_ms": list(self.step_host_ms),
        }


def stats_from_dict(d: dict[str, object]) -> TimingStats:
    """``TimingStats.to_dict()`` read back (the serving-timing process hands its timings over as JSON)."""
    return TimingStats(median_ms=float(d["median_ms"]), p10_ms=float(d["p10_ms"]), p90_ms=float(d["p90_ms"]),
                       min_ms=float(d["min_ms"]), max_ms=float(d["max_ms"]), n=int(d["n"]),
                       values_ms=tuple(float(v) for v in d["values_ms"]))  # type: ignore[union-attr]


def timing_from_dict(d: dict[str, object]) -> PhaseTiming:
    """``PhaseTiming.to_dict()`` read back; the inverse, field for field."""
    opt = {k: stats_from_dict(d[k]) if d.get(k) else None for k in ("tpot", "tpot_host")}  # type: ignore[arg-type]
    return PhaseTiming(phase=Phase(d["phase"]), prompt_tokens=int(d["prompt_tokens"]),
                       output_tokens=int(d["output_tokens"]), reps=int(d["reps"]), warmup=int(d["warmup"]),
                       source=str(d["source"]), ttft=stats_from_dict(d["ttft"]),  # type: ignore[arg-type]
                       ttft_host=stats_from_dict(d["ttft_host"]), tpot=opt["tpot"],  # type: ignore[arg-type]
                       tpot_host=opt["tpot_host"], step_host_ms=tuple(float(v) for v in d["step_host_ms"]))
