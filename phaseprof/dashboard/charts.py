"""Plotly figures for the dashboard. Builders only: every value plotted is read from a phaseprof result
(``Breakdown``, ``BreakdownDiff``, ``StepTimeline``, sweep points); times are shown in ms or µs as stored.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from phaseprof.analysis.results import Breakdown, StepRow
from phaseprof.dashboard.text import plot

#: One colour per bucket, the same on every page.
BUCKET_COLORS: dict[str, str] = {
    "moe": "#d62728", "gdn": "#9467bd", "attention": "#1f77b4", "gemm": "#ff7f0e", "norm": "#8c564b",
    "elementwise": "#2ca02c", "memory": "#7f7f7f", "communication": "#17becf", "sampling": "#bcbd22",
    "other": "#c7c7c7", "unknown": "#e377c2",
}
IDLE_COLORS = {"launch_overhead": "#e45756", "host_work": "#f2a93b", "other": "#b0b0b0"}
IDLE_LABELS = {"launch_overhead": "idle: in launch calls", "host_work": "idle: host work",
               "other": "idle: queued / tail"}
HOST_COLORS = {"launch": "#4c78a8", "sync": "#e45756", "malloc": "#b279a2", "free": "#9d755d", "other": "#bab0ac"}
#: The timeline draws at most this many bars per layer (browsers slow down beyond), largest first.
MAX_TIMELINE_BARS = 20_000
#: The largest idle gaps of a step are shaded across all lanes and labelled.
SHADED_GAPS = 12
LABELLED_GAPS = 4


def color(bucket: str) -> str:
    return BUCKET_COLORS.get(bucket, "#aaaaaa")


def _layout(fig: go.Figure, *, title: str, height: int = 420) -> go.Figure:
    fig.update_layout(title=title, height=height, margin=dict(l=10, r=10, t=50, b=10), legend_title_text="",
                      template="plotly_white")
    return fig


def phase_buckets(bd: Breakdown, *, view: str, unit: str = "ms") -> go.Figure:
    """Stacked bar per phase by bucket. ``unit``: "ms" (sum over the phase's steps) or "%" of GPU busy."""
    fig = go.Figure()
    buckets: list[str] = []
    for ph in bd.phases:
        for b in (ph.kernel_view if view == "kernel" else ph.module_view):
            if b.bucket not in buckets:
                buckets.append(b.bucket)
    x = [f"{plot(ph.phase)} ({ph.steps} step{'s' if ph.steps != 1 else ''})" for ph in bd.phases]
    for name in buckets:
        rows = [{b.bucket: b for b in (ph.kernel_view if view == "kernel" else ph.module_view)}.get(name)
                for ph in bd.phases]
        y = [(r.time_us / 1e3 if unit == "ms" else r.share_pct) if r else None for r in rows]
        text = [f"{r.time_us / 1e3:,.3f} ms · {r.share_pct:.1f}% · {r.count:,} items" if r else "" for r in rows]
        fig.add_bar(x=x, y=y, name=plot(name), marker_color=color(name), hovertext=text, hoverinfo="text+name")
    fig.update_layout(barmode="stack", yaxis_title="ms (sum over steps)" if unit == "ms" else "% of GPU busy",
                      bargap=max(0.2, 0.8 - 0.15 * len(x)))
    return _layout(fig, title=f"GPU busy time by bucket, {view} view")


#: Per-step metrics charted on the Breakdown page: label -> (getter, axis).
STEP_METRICS: dict[str, tuple[Any, str]] = {
    "wall ms": (lambda r: r.wall_us / 1e3, "ms"),
    "GPU busy ms": (lambda r: r.gpu_busy_us / 1e3, "ms"),
    "GPU idle ms": (lambda r: r.gpu_idle_us / 1e3, "ms"),
    "launch overhead ms": (lambda r: r.idle.launch_overhead_us / 1e3, "ms"),
    "host work ms": (lambda r: r.idle.host_work_us / 1e3, "ms"),
    "kernels": (lambda r: r.kernels, "count"),
    "launch calls": (lambda r: r.launches.total, "count"),
    "allocations": (lambda r: r.memory.allocations, "count"),
    "device mallocs": (lambda r: r.memory.device_mallocs, "count"),
}


def per_step(rows: Sequence[StepRow], metrics: Sequence[str], *, title: str) -> go.Figure:
    """Lines per step (x = step index): times on the top axis, counts on the bottom one."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=("time per step (ms)", "counts per step"))
    x = [r.index for r in rows]
    for m in metrics:
        get, axis = STEP_METRICS[m]
        fig.add_scatter(x=x, y=[get(r) for r in rows], name=plot(m), mode="lines+markers",
                        row=1 if axis == "ms" else 2, col=1)
    fig.update_xaxes(title_text="step", row=2, col=1)
    return _layout(fig, title=title, height=520)


def compare_buckets(deltas: Sequence[Any], *, labels: tuple[str, str], view: str, phase: str) -> go.Figure:
    """Side-by-side bars per bucket: A and B, ms per step (``BucketDelta`` rows from ``diff_breakdowns``)."""
    names = [d.bucket for d in deltas]
    fig = go.Figure()
    for side, label, pattern in (("a", labels[0], ""), ("b", labels[1], "/")):
        vals = [getattr(d.time_ms, side) for d in deltas]
        shares = [getattr(d.share, side) for d in deltas]
        # The hatch gets its own colour: left to default, plotly.js reads the per-bar colour array as one colour
        # ("Invalid color specifier: Array(N)" in the console).
        hatch = dict(shape=pattern, fgcolor="#333333", solidity=0.3) if pattern else None
        fig.add_bar(x=[plot(n) for n in names], y=vals, name=plot(label), marker_color=[color(n) for n in names],
                    marker_pattern=hatch, opacity=1.0 if side == "a" else 0.65,
                    hovertext=[f"{plot(label)}: {v:,.3f} ms/step · {s:.1f}%" for v, s in zip(vals, shares)],
                    hoverinfo="text")
    fig.update_layout(barmode="group", yaxis_title="ms per step", xaxis_title="bucket")
    return _layout(fig, title=f"{plot(phase)}: A vs B by bucket ({view} view, ms per step; B hatched)")


def _bars(fig: go.Figure, df: Any, *, t0: int, lane: str, group: str, colors: dict[str, str],
          labels: dict[str, str] | None = None, hover: str = "name") -> None:
    if df.empty:
        return
    if len(df) > MAX_TIMELINE_BARS:
        df = df.assign(_d=df["end_ns"] - df["ts_ns"]).nlargest(MAX_TIMELINE_BARS, "_d")
    for g, sub in df.groupby(group, sort=False):
        start = (sub["ts_ns"] - t0) / 1e3
        dur = (sub["end_ns"] - sub["ts_ns"]) / 1e3
        text = [f"{plot(n)}<br>{d:,.2f} µs at +{s:,.2f} µs" for n, d, s in zip(sub[hover].astype(str), dur, start)]
        fig.add_bar(base=start, x=dur.clip(lower=1e-3), y=[plot(v) for v in sub[lane]], orientation="h",
                    name=plot((labels or {}).get(g, g)),
                    marker_color=colors.get(str(g), "#aaaaaa"), hovertext=text, hoverinfo="text",
                    legendgroup=str(g), width=0.8)


def _in_window(df: Any, lo: int | None, hi: int | None) -> Any:
    """The rows of ``df`` (``ts_ns``, ``end_ns``) that overlap ``[lo, hi)``; all of them without a window."""
    if lo is None or hi is None or df.empty:
        return df
    return df[(df["ts_ns"] < hi) & (df["end_ns"] > lo)]


def timeline(tl: Any, *, color_by: str = "kernel_bucket", window_us: tuple[float, float] | None = None) -> go.Figure:
    """One step: activities per stream coloured by bucket, GPU idle by cause, host API calls per thread.
    x = µs since the step's start; the largest idle gaps are shaded across all lanes and labelled.
    ``window_us`` (µs since the step's start) zooms in: only what overlaps it is drawn (so the bar cap applies
    to the window), and the axis shows just it."""
    t0 = tl.start_ns
    lo, hi = (t0 + round(window_us[0] * 1e3), t0 + round(window_us[1] * 1e3)) if window_us else (None, None)
    fig = go.Figure()
    _bars(fig, _in_window(tl.activities, lo, hi), t0=t0, lane="lane", group=color_by, colors=BUCKET_COLORS)
    idle = _in_window(tl.idle, lo, hi).assign(lane="GPU idle")
    _bars(fig, idle, t0=t0, lane="lane", group="cause", colors=IDLE_COLORS, labels=IDLE_LABELS, hover="cause")
    _bars(fig, _in_window(tl.host_calls, lo, hi), t0=t0, lane="lane", group="kind", colors=HOST_COLORS,
          labels={k: f"host: {k}" for k in HOST_COLORS})
    shown_gaps = _in_window(tl.gaps, lo, hi)
    gaps = shown_gaps.assign(ns=shown_gaps["end_ns"] - shown_gaps["ts_ns"]).nlargest(SHADED_GAPS, "ns") \
        if not shown_gaps.empty else shown_gaps
    for i, g in enumerate(gaps.itertuples()):
        label = {} if i >= LABELLED_GAPS else dict(
            annotation_text=IDLE_LABELS[g.cause].removeprefix("idle: "), annotation_position="top left",
            annotation_font_size=10)
        fig.add_vrect(x0=(g.ts_ns - t0) / 1e3, x1=(g.end_ns - t0) / 1e3, fillcolor=IDLE_COLORS[g.cause],
                      opacity=0.15, line_width=0, **label)
    lanes = _lane_order(tl)
    fig.update_yaxes(categoryorder="array", categoryarray=[plot(v) for v in lanes[::-1]], title_text="")
    title = f"step {tl.step} ({plot(tl.phase)}): {plot(tl.label[:70])}"
    _layout(fig, title=title, height=max(420, 200 + 34 * len(lanes)))
    fig.update_layout(barmode="overlay", xaxis_title="µs since step start", bargap=0.1,
                      legend=dict(orientation="h", yanchor="top", y=-0.3, x=0), margin=dict(b=110))
    if window_us:
        fig.update_xaxes(range=list(window_us))
    return fig


def _lane_order(tl: Any) -> list[str]:
    def num(s: str) -> tuple[int, str]:
        tail = s.rsplit(" ", 1)[-1]
        return (int(tail), s) if tail.lstrip("-").isdigit() else (1 << 62, s)

    gpu = sorted(set(tl.activities["lane"]), key=num) if not tl.activities.empty else []
    host = sorted(set(tl.host_calls["lane"]), key=num) if not tl.host_calls.empty else []
    return [*gpu, "GPU idle", *host]


def sweep_curves(curves: Sequence[dict[str, Any]], *, x_title: str, y_title: str) -> go.Figure:
    """Several sweeps overlaid: each ``{"name", "x", "y", "lo", "hi"}``; lo/hi (optional, e.g. p10/p90) are
    drawn as a shaded band around the line."""
    fig = go.Figure()
    palette = ["#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#ff9da6", "#9d755d"]
    for i, c in enumerate(curves):
        col = palette[i % len(palette)]
        if c.get("lo") is not None and c.get("hi") is not None:
            fig.add_scatter(x=c["x"], y=c["hi"], mode="lines", line=dict(width=0, color=col), showlegend=False,
                            hoverinfo="skip", legendgroup=c["name"])
            fig.add_scatter(x=c["x"], y=c["lo"], mode="lines", line=dict(width=0, color=col), fill="tonexty",
                            opacity=0.2, showlegend=False, hoverinfo="skip", legendgroup=c["name"])
        fig.add_scatter(x=c["x"], y=c["y"], name=plot(c["name"]), mode="lines+markers", line=dict(color=col),
                        legendgroup=c["name"])
    _layout(fig, title=f"{y_title} vs {x_title}", height=420 + 22 * len(curves))
    # Under the chart: beside it, long run names took two thirds of the width (issue 25).
    fig.update_layout(xaxis_title=x_title, yaxis_title=y_title, margin=dict(b=60 + 22 * len(curves)),
                      legend=dict(orientation="h", yanchor="top", y=-0.18, x=0))
    return fig
