"""What a sweep is asked (``SweepSpec``) and what each point measured (``PrefillPoint``, ``DecodePoint``), the
same on both engines (in-process: ``inprocess/sweep.py``; a live server: ``server/sweep.py``), and the plot.

Prefill point (per prompt length): ``warmup`` untimed requests, then ``reps`` single requests; TTFT median/p10/p90.
Decode point (per concurrency c): ``reps`` rounds of c requests added together (prompt P, N outputs each):
- ``tpot``: per-request TPOT (see inprocess/timing.py), median over all requests of all rounds;
- ``output_tok_per_s``: c x N / round wall time (first add_request to last token), one value per round;
- ``decode_tok_per_s``: c / median TPOT, the steady decode rate once all c are generating;
- ``serving``: the point as a serving benchmark reports it (``pareto.records.ServingMetrics``: TTFT, TPOT and
  ITL p50/p90/p99, request and token throughput, tokens/s per GPU and per user; ``capture.shared.serving``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from rich import box
from rich.console import Console
from rich.table import Table

from phaseprof.capture.shared.options import Phase, parse_int_list
from phaseprof.capture.shared.timing import PhaseTiming, TimingStats
from phaseprof.errors import PhaseprofError
from phaseprof.pareto.records import ServingMetrics, to_builtins

#: ``--tokens`` when not given: prefill sweeps these lengths, decode sweeps use this one prompt length.
DEFAULT_PREFILL_LENGTHS, DEFAULT_DECODE_PROMPT = "128..8192x2", "128"


@dataclass(frozen=True)
class SweepSpec:
    """What a sweep measures, in-process or on a server. Prefill: ``lengths``, one request at a time. Decode:
    ``concurrency`` with ``prompt_tokens`` and ``output_tokens`` each. ``warmup`` untimed requests (rounds)
    then ``reps`` timed ones per point; ``out``: parent of the sweep directory."""

    phase: Phase
    lengths: tuple[int, ...] = ()
    concurrency: tuple[int, ...] = ()
    prompt_tokens: int = 128
    output_tokens: int = 128
    reps: int = 5
    warmup: int = 1
    seed: int = 0
    out: Path = Path("runs")

    @classmethod
    def parse(cls, *, phase: Phase, tokens: str | None, concurrency: str, output_tokens: int, reps: int,
              warmup: int, seed: int = 0, out: Path = Path("runs")) -> SweepSpec:
        """The sweep the ``phaseprof sweep`` options ask for (both engines; one PhaseprofError line when they
        do not make one). ``tokens``/``concurrency``: the list syntax of ``parse_int_list``."""
        if reps < 1:
            raise PhaseprofError(f"--reps must be at least 1, got {reps}")
        if phase is Phase.PREFILL:
            return cls(phase=phase, lengths=tuple(parse_int_list(tokens or DEFAULT_PREFILL_LENGTHS, what="tokens")),
                       reps=reps, warmup=max(warmup, 0), seed=seed, out=out)
        prompt = parse_int_list(tokens or DEFAULT_DECODE_PROMPT, what="tokens")
        if len(prompt) != 1:
            raise PhaseprofError("a decode sweep takes one prompt length in --tokens (it sweeps --concurrency)")
        if output_tokens < 2:
            raise PhaseprofError("a decode sweep needs --output-tokens of at least 2")
        return cls(phase=phase, concurrency=tuple(parse_int_list(concurrency, what="concurrency")),
                   prompt_tokens=prompt[0], output_tokens=output_tokens, reps=reps, warmup=max(warmup, 0),
                   seed=seed, out=out)

    @property
    def label(self) -> str:
        """The sweep directory's range part: ``128-8192`` (prefill lengths) or ``c1-16`` (concurrency)."""
        if self.phase is Phase.PREFILL:
            return f"{self.lengths[0]}-{self.lengths[-1]}"
        return f"c{self.concurrency[0]}-{self.concurrency[-1]}"

    def request_count(self) -> int:
        """Requests the sweep sends in all (warm-up and timed, every point)."""
        per = self.warmup + self.reps
        return per * (len(self.lengths) if self.phase is Phase.PREFILL else sum(self.concurrency))


@dataclass(frozen=True)
class PrefillPoint:
    """TTFT at one prompt length (``ttft`` from ``source``, ``ttft_host`` always host clock)."""

    prompt_tokens: int
    ttft: TimingStats
    ttft_host: TimingStats
    source: str

    def to_dict(self) -> dict[str, Any]:
        return {"prompt_tokens": self.prompt_tokens, "ttft": self.ttft.to_dict(),
                "ttft_host": self.ttft_host.to_dict(), "source": self.source}


@dataclass(frozen=True)
class DecodePoint:
    """Decode at one concurrency (see the module docstring for each number)."""

    concurrency: int
    prompt_tokens: int
    output_tokens: int
    tpot: TimingStats
    output_tok_per_s: dict[str, float]  # median, p10, p90 over rounds
    decode_tok_per_s: float
    source: str
    serving: ServingMetrics | None = None
    timing: PhaseTiming | None = field(default=None, compare=False, repr=False)  # not written: a profile's pair

    def to_dict(self) -> dict[str, Any]:
        return {"concurrency": self.concurrency, "prompt_tokens": self.prompt_tokens,
                "output_tokens": self.output_tokens, "tpot": self.tpot.to_dict(),
                "output_tok_per_s": self.output_tok_per_s, "decode_tok_per_s": self.decode_tok_per_s,
                "source": self.source, "serving": None if self.serving is None else to_builtins(self.serving)}


def world_size_of(engine_kwargs: dict[str, Any]) -> int:
    """GPUs (ranks) one engine of these ``vllm.LLM`` arguments runs on: tensor x pipeline x data parallel."""
    n = 1
    for key in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"):
        n *= int(engine_kwargs.get(key) or 1)
    return n


def spread(values: list[float]) -> dict[str, float]:
    """Median, 10th and 90th percentile of ``values`` (one per round)."""
    p10, p50, p90 = np.percentile(np.asarray(values, dtype=float), [10, 50, 90])
    return {"median": float(p50), "p10": float(p10), "p90": float(p90)}


def prefill_plot_spec(points: list[PrefillPoint], *, title: str) -> dict[str, Any]:
    """A Plotly figure (plain JSON: data + layout) of TTFT vs prompt length with p10-p90 error bars."""
    x = [p.prompt_tokens for p in points]
    y = [p.ttft.median_ms for p in points]
    return {
        "data": [{
            "type": "scatter", "mode": "lines+markers", "name": "TTFT median", "x": x, "y": y,
            "error_y": {"type": "data", "symmetric": False,
                        "array": [p.ttft.p90_ms - p.ttft.median_ms for p in points],
                        "arrayminus": [p.ttft.median_ms - p.ttft.p10_ms for p in points]},
        }],
        "layout": {"title": {"text": title}, "xaxis": {"title": {"text": "prompt tokens"}},
                   "yaxis": {"title": {"text": "TTFT (ms), median with p10-p90"}, "rangemode": "tozero"}},
    }


def decode_plot_spec(points: list[DecodePoint], *, title: str) -> dict[str, Any]:
    """A Plotly figure of TPOT (left axis) and output throughput (right axis) vs concurrency."""
    x = [p.concurrency for p in points]
    return {
        "data": [
            {"type": "scatter", "mode": "lines+markers", "name": "TPOT median (ms)", "x": x,
             "y": [p.tpot.median_ms for p in points]},
            {"type": "scatter", "mode": "lines+markers", "name": "output tokens/s", "x": x, "yaxis": "y2",
             "y": [p.output_tok_per_s["median"] for p in points]},
        ],
        "layout": {"title": {"text": title}, "xaxis": {"title": {"text": "concurrent requests"}, "type": "log"},
                   "yaxis": {"title": {"text": "TPOT (ms)"}, "rangemode": "tozero"},
                   "yaxis2": {"title": {"text": "output tokens/s"}, "overlaying": "y", "side": "right",
                              "rangemode": "tozero"}},
    }


def write_plot(spec: dict[str, Any], directory: Path) -> list[str]:
    """Write ``plot.json`` (always) and ``plot.html`` (when plotly is installed). Returns the file names. The
    title holds the model's name as the server reported it: every string is made inert first
    (``safe_text.plotly_figure``: plotly reads ``<a href>``, ``<span style>`` as markup)."""
    from phaseprof.capture.shared.rundir import write_json  # noqa: PLC0415
    from phaseprof.safe_text import plotly_figure  # noqa: PLC0415

    spec = plotly_figure(spec)
    write_json(directory / "plot.json", spec)
    names = ["plot.json"]
    try:
        import plotly.graph_objects as go  # noqa: PLC0415
        import plotly.io as pio  # noqa: PLC0415
    except ImportError:
        return names
    pio.write_html(go.Figure(spec), str(directory / "plot.html"), include_plotlyjs="cdn", full_html=True)
    names.append("plot.html")
    return names


def slope_us_per_token(points: list[PrefillPoint]) -> float | None:
    """Least-squares slope of median TTFT vs prompt length, in µs per prompt token (None with < 2 points)."""
    if len(points) < 2:
        return None
    x = np.array([p.prompt_tokens for p in points], dtype=float)
    y = np.array([p.ttft.median_ms for p in points], dtype=float) * 1e3
    return float(np.polyfit(x, y, 1)[0])


def print_sweep(doc: dict[str, Any], console: Console) -> None:
    """The sweep's table (one row per point); the record's strings made safe for rich first."""
    from phaseprof.safe_text import for_terminal  # noqa: PLC0415

    doc = for_terminal(doc)
    table = Table(title=f"{doc['phase']} sweep · {doc['model']['name']} · {doc['device']['name']}")
    if doc["phase"] == "prefill":
        for col in ("prompt tokens", "TTFT median ms", "p10", "p90", "source"):
            table.add_column(col, justify="right")
        for p in doc["points"]:
            t = p["ttft"]
            table.add_row(str(p["prompt_tokens"]), f"{t['median_ms']:.2f}", f"{t['p10_ms']:.2f}",
                          f"{t['p90_ms']:.2f}", p["source"])
    else:
        # the eight columns fit 80 terminal columns without a grid
        table.box, table.padding, table.pad_edge = box.SIMPLE_HEAD, (0, 1), False
        table.caption = "t/s: tokens/s (out: per round; dec: c / TPOT; per GPU: total tokens; per user: 1 / TPOT)"
        for col in ("c", "TPOT ms", "p10", "p90", "out t/s", "dec t/s", "t/s/GPU", "t/s/user"):
            table.add_column(col, justify="right", no_wrap=True)
        for p in doc["points"]:
            t = p["tpot"]
            s = p.get("serving") or {}  # absent in sweeps recorded before serving metrics
            table.add_row(str(p["concurrency"]), f"{t['median_ms']:.2f}", f"{t['p10_ms']:.2f}",
                          f"{t['p90_ms']:.2f}", f"{p['output_tok_per_s']['median']:.1f}",
                          f"{p['decode_tok_per_s']:.1f}",
                          f"{s['tps_per_gpu']:.1f}" if s else "-", f"{s['tps_per_user']:.1f}" if s else "-")
    console.print(table)
