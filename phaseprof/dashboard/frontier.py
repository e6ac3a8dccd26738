"""The Pareto page's pieces without Streamlit: which sweeps, profiled runs and ceilings files under the runs
directory `phaseprof pareto` can take, and the frontier chart and tables drawn from its ``ParetoReport``.

Every number shown is the report's (``pareto.build.build_report``); this module only chooses inputs, shortens
configuration labels (words every label shares are dropped) and lays the numbers out. Every name from a file
reaches the figure through ``text.plot``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import plotly.graph_objects as go

from phaseprof.dashboard.sources import MAX_SCAN_DEPTH, Roots, guard
from phaseprof.dashboard.text import plot
from phaseprof.errors import PhaseprofError
from phaseprof.gpu_names import gpu_key
from phaseprof.pareto.records import ParetoPoint, ParetoReport
from phaseprof.records import RunRecord, SweepRecord

#: One colour per configuration, in the order of the report's configs (the Sweep page's palette).
PALETTE = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#ff9da6", "#9d755d")
#: Where measured ceilings live (``phaseprof ceilings`` writes them there; ``sol.attach.CEILINGS_DIR``).
CEILINGS_DIR = "ceilings"
SPEC = "spec"
#: The default choice: no ``--ceilings``, as ``phaseprof pareto`` runs without it (each GPU's one baseline,
#: ``sol.ceilings.choose_ceiling``: the measured file phaseprof ships for it, else the datasheet).
AUTO = "auto"


@dataclass(frozen=True)
class DecodeSweep:
    """A decode sweep under the runs directory with serving metrics at every point (what ``pareto`` reads)."""

    key: str  # the sweep directory relative to the runs directory
    directory: Path
    points: int
    device: str | None
    prompt_tokens: int
    output_tokens: int

    @property
    def workload(self) -> str:
        """ISL/OSL: a frontier compares configurations serving one workload."""
        return f"{self.prompt_tokens}/{self.output_tokens}"


def decode_sweep(sweep_json: Path, roots: Roots) -> DecodeSweep | None:
    """The sweep if ``pareto`` can take it (decode, every point with ``serving``), else None."""
    f = guard(sweep_json, roots)
    rec = SweepRecord.read(f)
    if rec.phase != "decode" or not rec.points or not all(p.serving for p in rec.points):
        return None
    d = f.parent
    key = d.relative_to(roots.runs_dir).as_posix() if d != roots.runs_dir else "."
    first = rec.points[0].serving or {}
    return DecodeSweep(key=key, directory=d, points=len(rec.points), device=rec.device.name,
                       prompt_tokens=int(first.get("prompt_tokens") or 0),
                       output_tokens=int(first.get("output_tokens") or 0))


def default_workload(sweeps: list[DecodeSweep]) -> str:
    """The workload with the most sweeps of more than one point (a curve each); ties: more output tokens."""
    multi = [s for s in sweeps if s.points > 1] or sweeps
    counts: dict[str, tuple[int, int]] = {}
    for s in multi:
        n, _ = counts.get(s.workload, (0, 0))
        counts[s.workload] = (n + 1, s.output_tokens)
    return max(counts, key=lambda w: counts[w])


def is_profiled_candidate(run: RunRecord | None) -> bool:
    """A decode run with a breakdown: what ``pareto --profiled`` takes."""
    return run is not None and run.request.phase == "decode" and bool(run.breakdown)


def ceilings_files(roots: Roots) -> list[tuple[str, str]]:
    """(key, GPU it was measured on) of every measured-ceilings JSON in a ``ceilings/`` folder under the runs
    directory (files that ``sol.ceilings.load_measured`` refuses, or links leading out, are left out)."""
    from phaseprof.sol.ceilings import load_measured

    root = roots.runs_dir
    out = []
    for dirpath, dirnames, _ in os.walk(root, followlinks=False):
        d = Path(dirpath)
        depth = len(d.relative_to(root).parts)
        dirnames[:] = sorted(n for n in dirnames if not n.startswith(".")) if depth < MAX_SCAN_DEPTH else []
        if d.name != CEILINGS_DIR:
            continue
        for f in sorted(d.glob("*.json")):
            try:
                doc = load_measured(guard(f, roots))
            except (PhaseprofError, OSError):
                continue
            out.append((f.relative_to(root).as_posix(), str(doc.get("gpu_name") or "?")))
    return out


def short_labels(labels: list[str]) -> dict[str, str]:
    """Each configuration label without the words every label shares (``qwen3.5-35b-a3b graph bf16 1gpu async``
    and ``... fp8 ...`` -> ``bf16`` and ``fp8``); the whole label when that leaves nothing or two alike."""
    words = [label.split() for label in labels]
    common = set.intersection(*(set(w) for w in words)) if len(words) > 1 else set()
    short = {label: " ".join(x for x in w if x not in common) or label for label, w in zip(labels, words)}
    if len(set(short.values())) < len(short):
        return {label: label for label in labels}
    return short


def run_key(breakdown: str | None, runs_dir: Path) -> str | None:
    """The Runs-page key of a point's profiled run directory, or of a sweep directory: its path under the runs
    directory (None when it lies outside)."""
    if not breakdown:
        return None
    try:
        return Path(breakdown).resolve().relative_to(runs_dir).as_posix()
    except (ValueError, OSError):
        return None


def breakdown_link(key: str | None) -> str | None:
    """A link to the Breakdown page of a run (its key quoted, so it stays one query value)."""
    return None if key is None else f"?page=Breakdown&run={quote(key, safe='/')}"


def _hover(p: ParetoPoint, name: str, key: str | None, front: set[tuple[str, int]], short: dict[str, str]) -> str:
    lines = [f"{plot(name)}  c = {p.concurrency}",
             f"{p.tps_per_user:,.1f} tok/s per user · {p.tps_per_gpu:,.1f} tok/s per GPU",
             f"TPOT p50 {p.tpot_p50_ms:,.2f} ms · TTFT p50 {p.ttft_p50_ms:,.2f} ms"]
    if p.sol is not None:
        lines.append(f"speed of light: {p.sol.pct_of_light:.0f}% (floor {p.sol.floor_tpot_ms:,.2f} ms per step)")
    lines.append("on the frontier" if (p.config, p.concurrency) in front
                 else f"dominated by {plot(_by(p.dominated_by, short))}")
    if p.over_capacity:
        lines.append("OVER the capacity wall")
    lines.append(f"breakdown: {plot(key)} (click to open)" if key else
                 "breakdown: yes (outside the runs directory)" if p.breakdown else "breakdown: none")
    return "<br>".join(lines)


def frontier_figure(report: ParetoReport, short: dict[str, str], runs_dir: Path, *, log_axes: bool = True
                    ) -> go.Figure:
    """x = tokens/s per user, y = tokens/s per GPU. Per configuration its measured points (joined by
    concurrency; a diamond where a breakdown exists) and, dotted, each point's speed-of-light point; the
    frontier across configurations as a dark line through ringed points; points over the capacity wall crossed.
    ``customdata`` of a measured or speed-of-light marker = the point's index in ``report.points``."""
    fig = go.Figure()
    front = {(f.config, f.concurrency) for f in report.frontier}
    for ci, c in enumerate(report.configs):
        col = PALETTE[ci % len(PALETTE)]
        idx = sorted((i for i, p in enumerate(report.points) if p.config == c.config),
                     key=lambda i: report.points[i].concurrency)
        pts = [report.points[i] for i in idx]
        keys = [run_key(p.breakdown, runs_dir) for p in pts]
        name = short.get(c.config, c.config)
        fig.add_scatter(
            x=[p.tps_per_user for p in pts], y=[p.tps_per_gpu for p in pts], name=plot(name), legendgroup=str(ci),
            mode="lines+markers+text", text=[f"c{p.concurrency}" for p in pts], textposition="top center",
            textfont=dict(size=10, color=col), line=dict(color=col, width=1.5), customdata=idx,
            marker=dict(color=col, size=[14 if (p.config, p.concurrency) in front else 10 for p in pts],
                        symbol=["diamond" if p.breakdown else "circle" for p in pts],
                        line=dict(color="#222222", width=[2 if (p.config, p.concurrency) in front else 0
                                                          for p in pts])),
            hovertext=[_hover(p, name, k, front, short) for p, k in zip(pts, keys)], hoverinfo="text")
        lit = [(i, p) for i, p in zip(idx, pts) if p.sol is not None]
        if lit:
            seg_x: list[float | None] = []
            seg_y: list[float | None] = []
            for _, p in lit:
                seg_x += [p.tps_per_user, p.sol.tps_per_user, None]
                seg_y += [p.tps_per_gpu, p.sol.tps_per_gpu, None]
            fig.add_scatter(x=seg_x, y=seg_y, mode="lines", line=dict(color=col, width=1, dash="dot"),
                            legendgroup=str(ci), showlegend=False, hoverinfo="skip")
            fig.add_scatter(
                x=[p.sol.tps_per_user for _, p in lit], y=[p.sol.tps_per_gpu for _, p in lit],
                name=plot(f"{name}: speed of light"), legendgroup=str(ci), mode="markers",
                marker=dict(color=col, size=9, symbol="circle-open", line=dict(width=2)),
                customdata=[i for i, _ in lit],
                hovertext=[f"{plot(name)}  c = {p.concurrency}: speed of light<br>"
                           f"{p.sol.tps_per_user:,.1f} tok/s per user · {p.sol.tps_per_gpu:,.1f} tok/s per GPU<br>"
                           f"floor {p.sol.floor_tpot_ms:,.2f} ms vs measured {p.sol.measured_tpot_ms:,.2f} ms "
                           f"per step ({p.sol.pct_of_light:.0f}% of light)<br>ceilings: {plot(p.sol.ceiling)}"
                           for _, p in lit], hoverinfo="text")
    if report.frontier:
        fig.add_scatter(x=[f.tps_per_user for f in report.frontier], y=[f.tps_per_gpu for f in report.frontier],
                        name="frontier", mode="lines", line=dict(color="#222222", width=2.5, dash="dash"),
                        hoverinfo="skip")
    if report.sol_frontier:
        fig.add_scatter(x=[f.tps_per_user for f in report.sol_frontier],
                        y=[f.tps_per_gpu for f in report.sol_frontier], name="speed-of-light frontier",
                        mode="lines", line=dict(color="#999999", width=1.5, dash="dot"), hoverinfo="skip")
    over = [p for p in report.points if p.over_capacity]
    if over:
        fig.add_scatter(x=[p.tps_per_user for p in over], y=[p.tps_per_gpu for p in over],
                        name="over the capacity wall", mode="markers", hoverinfo="skip",
                        marker=dict(symbol="x-thin", size=20, line=dict(color="#d62728", width=3)))
    axis = dict(type="log") if log_axes else {}
    fig.update_layout(title="tokens/s per GPU vs tokens/s per user (◆ profiled: click to open its breakdown)",
                      height=620, template="plotly_white", margin=dict(l=10, r=10, t=50, b=10),
                      xaxis=dict(title="tokens/s per user (1000 / TPOT p50)", **axis),
                      yaxis=dict(title="tokens/s per GPU (prompt + output)", **axis),
                      legend=dict(orientation="h", yanchor="top", y=-0.12, x=0), clickmode="event+select")
    return fig


def frontier_rows(report: ParetoReport, short: dict[str, str], runs_dir: Path) -> list[dict[str, Any]]:
    """The frontier table, by tokens/s per user as the report orders it (the measured point's latencies and
    floor looked up by config and concurrency); ``breakdown``: the link to a profiled point's Breakdown page
    (``breakdown_link``); ``over capacity`` only where some configuration has a capacity wall."""
    by = {(p.config, p.concurrency): p for p in report.points}
    walls = any(c.capacity is not None for c in report.configs)
    rows = []
    for f in report.frontier:
        p = by[(f.config, f.concurrency)]
        key = run_key(f.breakdown, runs_dir)
        rows.append({"config": short.get(f.config, f.config), "c": f.concurrency, "tok/s/GPU": f.tps_per_gpu,
                     "tok/s/user": f.tps_per_user, "TPOT ms": p.tpot_p50_ms, "TTFT ms": p.ttft_p50_ms,
                     "% of light": None if f.sol is None else f.sol.pct_of_light,
                     "floor TPOT ms": None if f.sol is None else f.sol.floor_tpot_ms,
                     **({} if not walls else {"over capacity": "yes" if p.over_capacity else ""}),
                     "breakdown": breakdown_link(key)})
    return rows


def point_rows(report: ParetoReport, short: dict[str, str], runs_dir: Path) -> list[dict[str, Any]]:
    """Every point, by configuration and concurrency."""
    order = {c.config: i for i, c in enumerate(report.configs)}
    return [{"config": short.get(p.config, p.config), "c": p.concurrency, "tok/s/GPU": p.tps_per_gpu,
             "tok/s/user": p.tps_per_user, "output tok/s/GPU": p.output_tps_per_gpu, "TPOT ms": p.tpot_p50_ms,
             "TTFT ms": p.ttft_p50_ms, "% of light": None if p.sol is None else p.sol.pct_of_light,
             "floor TPOT ms": None if p.sol is None else p.sol.floor_tpot_ms,
             "over capacity": "yes" if p.over_capacity else "", "dominated by": _by(p.dominated_by, short),
             "breakdown": run_key(p.breakdown, runs_dir) or p.breakdown or ""}
            for p in sorted(report.points, key=lambda p: (order.get(p.config, 0), p.concurrency))]


def _by(dominated_by: str | None, short: dict[str, str]) -> str:
    """``dominated_by`` (``<config> c=<N>``) with the short label."""
    if not dominated_by:
        return ""
    config, _, c = dominated_by.rpartition(" c=")
    return f"{short.get(config, config)} c={c}" if config else dominated_by


def config_rows(report: ParetoReport, short: dict[str, str], runs_dir: Path) -> list[dict[str, Any]]:
    """Each configuration: its whole label, sweep, GPUs, ISL/OSL, capacity wall and notes."""
    rows = []
    for c in report.configs:
        cap = c.capacity
        rows.append({"config": short.get(c.config, c.config), "label": c.config,
                     "sweep": run_key(c.sweep, runs_dir) or c.sweep,
                     "GPUs": c.world_size, "ISL/OSL": f"{c.prompt_tokens}/{c.output_tokens}",
                     "max concurrency": None if cap is None else cap.max_concurrency,
                     "notes": "; ".join(n for n in (c.capacity_note, c.sol_note) if n)})
    return rows
