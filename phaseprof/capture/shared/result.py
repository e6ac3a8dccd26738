"""A finished capture, in-process or through a live server, and its few headline lines on the terminal."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from phaseprof.capture.shared.options import Phase
from phaseprof.capture.shared.timing import PhaseTiming
from phaseprof.records import RunRecord
from phaseprof.safe_text import terminal

#: How each ``PhaseTiming.source`` reads in the headline.
CLOCKS = {"vllm_request_metrics": "vLLM request metrics", "host_clock": "host clock", "client_stream": "client clock"}


@dataclass(frozen=True)
class CaptureResult:
    """A finished capture: its run directory and ``record`` (what run.json says), the headline's clean
    ``timing``, and the analysis: ``breakdowns`` per rank (one in-process capture: rank 0), or why there is
    none (``breakdown_error``); ``rank_summary`` (``scale.ranks.RankSummary``) when several ranks were analysed.

    ``overhead_ratio`` = profiled / clean time of the same quantity (in-process: host clock, TTFT for prefill,
    per-token decode step time for decode; server: the headline metric on the client clock); 1.25 means the
    profiler made the phase 25% slower.
    """

    run_dir: Path
    record: RunRecord
    timing: PhaseTiming
    overhead_ratio: float | None
    breakdowns: dict[int, Any]
    breakdown_error: str | None
    warnings: tuple[str, ...] = ()
    rank_summary: Any = None
    #: run.json as written (``record.to_dict()``).
    run: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def breakdown(self) -> Any | None:
        """The one breakdown of a one-rank capture (None with several ranks or none)."""
        return next(iter(self.breakdowns.values())) if len(self.breakdowns) == 1 else None


def print_headline(result: CaptureResult, console: Console) -> None:
    """The clean number, its spread and clock, the profiler overhead, and where the run went."""
    t, rec = result.timing, result.record
    h = t.headline
    server = rec.source == "server"
    console.print(
        f"[bold]{t.phase.metric.upper()} {h.median_ms:.2f} ms[/] (p10 {h.p10_ms:.2f}, p90 {h.p90_ms:.2f}; "
        f"{t.reps} {'rounds' if server else 'reps'}, {CLOCKS.get(t.source, t.source)})"
        + (f"  ·  TTFT {t.ttft.median_ms:.2f} ms" if t.phase is Phase.DECODE else ""))
    a = rec.engine.async_scheduling or {}
    if a.get("ratio") is not None:
        console.print(f"timed with vLLM's serving defaults (async scheduling {'on' if a['timed'] else 'off'}); the "
                      f"profiled engine (async scheduling off) times it at {a['marker_timing_ms']:.2f} ms, "
                      f"×{a['ratio']:.2f}")
    if a.get("vllm_generate_ms") is not None:
        console.print(f"vLLM alone (llm.generate, same engine): {a['vllm_generate_ms']:.2f} ms; phaseprof's "
                      f"request driver ×{a['vllm_generate_ratio']:.3f}")
    sizes = ((rec.engine.kwargs or {}).get("compilation_config") or {}).get("cudagraph_capture_sizes") \
        if not server and rec.mode == "graph" else None
    if sizes and t.phase is Phase.PREFILL and t.prompt_tokens > 512 and max(sizes) >= t.prompt_tokens:
        console.print(f"[dim]CUDA graphs captured up to {max(sizes)} tokens (the seed's sizes): vLLM's default "
                      f"stops at 512, so vLLM serves a {t.prompt_tokens}-token prefill without CUDA graphs "
                      "(compiled, its kernels launched one by one)[/]")
    elif a.get("refused"):
        console.print(f"[dim]{terminal(a['refused'])}[/]")
    if result.overhead_ratio is not None and rec.profile is not None:
        p = rec.profile
        if server:
            n_ranks, other = len(p.rank_traces or []), len(p.other_new_traces or [])
            console.print(f"profiler overhead ×{result.overhead_ratio:.2f}; {n_ranks} rank trace(s)"
                          + (f" (+{other} front-end)" if other else "") + f" complete after {p.trace_wait_s:.1f} s")
        else:
            console.print(f"profiler overhead ×{result.overhead_ratio:.2f} (profiled / unprofiled host time); "
                          f"{p.profiled_steps} profiled steps, trace {(rec.trace.gz_bytes or 0) / 1e6:.2f} MB")
    for loc in (rec.trace.extra.get("rank_locations") if rec.trace else None) or []:
        if loc["stayed_on_node"]:
            console.print(f"rank {loc['rank']}: analysed on {loc['host']} (Ray node {loc['node_id'][:8]}), its trace "
                          f"stays there: {loc['path']}", markup=False, highlight=False, soft_wrap=True)
    for w in result.warnings:
        console.print(f"[yellow]warning:[/] {w}", soft_wrap=True)
    if result.breakdown_error and not server:
        console.print(f"[yellow]no breakdown:[/] {result.breakdown_error}")
    console.print(f"run directory: {result.run_dir}")
