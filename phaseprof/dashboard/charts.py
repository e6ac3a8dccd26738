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


#: Colours of the idle parts of a step (``analysis.digest.IDLE_PARTS`` names), as on the Timeline.
IDLE_PART_COLORS = {**{IDLE_LABELS[k]: c for k, c in IDLE_COLORS.items()}, "busy: other steps' work": "#6f6f9f"}


#: The horizontal legend under a chart: one row's height, and the axis (tick labels and title) above it (px).
LEGEND_ROW_PX, AXIS_PX = 20, 60


def phase_buckets(bd: Breakdown, *, view: str, unit: str = "ms", title: str | None = None,
                  legend_columns: int = 6) -> go.Figure:
    """One horizontal stacked bar per phase: its mean step, split into GPU busy time by bucket, GPU idle time by
    cause and neighbouring steps' work (``analysis.digest.step_parts``), so the bar is the step's wall time.
    ``unit``: "ms" (per step) or "%" (of the step's wall time); ``title``: instead of the usual one (plain text,
    escaped here); ``legend_columns``: legend entries a row holds at the chart's width (a full-width chart about
    6; a half-width column 2), for the room kept under the axis."""
    from phaseprof.analysis.digest import step_parts

    parts = {ph.phase: {p.name: p for p in step_parts(ph, bd.steps, view=view)} for ph in bd.phases}
    names: list[str] = []
    for by_name in parts.values():
        names += [n for n in by_name if n not in names]
    y = [f"{plot(ph.phase)} ({ph.steps} step{'s' if ph.steps != 1 else ''})" for ph in bd.phases]
    fig = go.Figure()
    kinds = {p.name: p.kind for by_name in parts.values() for p in by_name.values()}
    for name in sorted(names, key=lambda n: kinds[n] != "busy"):  # busy buckets first, idle (and overlap) after
        rows = [parts[ph.phase].get(name) for ph in bd.phases]
        x = [(r.ms_per_step if unit == "ms" else r.pct_of_wall) if r else None for r in rows]
        idle = kinds[name] != "busy"
        text = [(f"{r.ms_per_step:,.2f} ms/step · {r.pct_of_wall:.1f}% of the step"
                 + ("" if idle else f" · {r.items_per_step:,.0f} items/step")) if r else "" for r in rows]
        fig.add_bar(y=y, x=x, name=plot(name), orientation="h",
                    marker_color=IDLE_PART_COLORS.get(name) if idle else color(name),
                    marker_pattern=dict(shape="/", fgcolor="#ffffff", solidity=0.25) if idle else None,
                    text=[f"{v:,.2f}" if v is not None else "" for v in x], textposition="inside",
                    insidetextanchor="middle", textangle=0, hovertext=text, hoverinfo="text+name")
    axis = "ms per step" if unit == "ms" else "% of the step's wall time"
    fig.update_layout(barmode="stack", xaxis_title=axis, uniformtext=dict(minsize=10, mode="hide"),
                      yaxis=dict(autorange="reversed"))
    busy = "CPU op time" if bd.trace.device == "cpu" else "GPU busy"  # a CPU-only trace's work items are CPU ops
    plot_px = 80 + 60 * (len(y) - 1)
    bottom_px = AXIS_PX + LEGEND_ROW_PX * -(-len(names) // max(legend_columns, 1))
    _layout(fig, title=plot(title) if title is not None else
            f"Where a step's time goes: {busy} by bucket ({view} view), then idle by cause",
            height=plot_px + bottom_px + 50)
    # The legend on the figure's bottom edge (container units), the axis title in the margin above it: a legend
    # that wraps into more rows than kept for it (a narrower column) takes the plot's height, never the title's
    # place (placed under the plot in paper units, it rose into the title as plotly grew the margin for it).
    fig.update_layout(legend=dict(orientation="h", yref="container", yanchor="bottom", y=0, x=0,
                                  traceorder="normal"), margin=dict(b=bottom_px))
    return fig


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
                    hovertext=[f"{plot(label)}: {v:,.2f} ms/step · {s:.1f}%" for v, s in zip(vals, shares)],
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
    # Under the chart: beside it, long run names took two thirds of the width.
    fig.update_layout(xaxis_title=x_title, yaxis_title=y_title, margin=dict(b=60 + 22 * len(curves)),
                      legend=dict(orientation="h", yanchor="top", y=-0.18, x=0))
    return fig


#: Roofline marker per phase.
PHASE_SYMBOLS = {"prefill": "circle", "decode": "diamond", "mixed": "square"}


def roofline(sol: Any) -> go.Figure:
    """Log-log roofline of a speed-of-light section (``sol.roofline.roofline_data``): the roof, and one point per
    phase and bucket that did FLOPs, coloured by bucket, shaped by phase, named in the legend (no labels on the
    points: they overlapped). A bucket that ran faster than its floor (``SolBucket.beats_floor``: >100% of light;
    every point drawn above its roof is one) gets a red ring. Buckets without FLOPs have no place on a FLOP/s
    axis: they are in the table."""
    from phaseprof.sol.roofline import roofline_data

    data = roofline_data(sol)
    fig = go.Figure()
    if data is None:
        return _layout(fig, title=f"roofline: {plot(sol.status)}")
    pts = [p for p in data.points if p.achieved_tflops > 0]
    beats = {(ph.phase, b.bucket): b.beats_floor for ph in sol.phases for b in ph.buckets}
    xs_pts = [p.intensity_flop_per_byte for p in pts]
    lo = min([data.ridge_flop_per_byte / 100] + [x / 2 for x in xs_pts])
    hi = max([data.ridge_flop_per_byte * 10] + [x * 2 for x in xs_pts])
    xs = [lo, data.ridge_flop_per_byte, hi]
    fig.add_scatter(x=xs, y=[data.roof(x) for x in xs], mode="lines", name=plot(f"roof ({data.kind})"),
                    line=dict(color="black", width=2),
                    hovertext=[f"{data.hbm_tbps:g} TB/s", f"ridge {data.ridge_flop_per_byte:.0f} FLOP/B",
                               f"{data.peak_tflops:,.0f} TFLOP/s {plot(data.precision)}"], hoverinfo="text")
    several = len({p.phase for p in pts}) > 1
    for p in pts:
        flag = beats.get((p.phase, p.bucket))
        light = "-" if p.pct_of_light is None else f"{p.pct_of_light:.0f}"
        fig.add_scatter(
            x=[p.intensity_flop_per_byte], y=[p.achieved_tflops], mode="markers",
            name=plot(f"{p.bucket} ({p.phase})" if several else p.bucket),
            marker=dict(size=12, symbol=PHASE_SYMBOLS.get(p.phase, "circle"), color=color(p.bucket),
                        line=dict(color="#222222", width=1)),
            hovertext=[f"{plot(p.bucket)} ({plot(p.phase)}): {p.achieved_tflops:,.1f} TFLOP/s, "
                       f"{p.achieved_tbps:.2f} TB/s, {p.time_ms:,.2f} ms, {light}% of light"
                       + (f"<br>faster than its floor: {plot(flag)}" if flag else "")], hoverinfo="text")
    flagged = [p for p in pts if beats.get((p.phase, p.bucket))]
    if flagged:
        fig.add_scatter(x=[p.intensity_flop_per_byte for p in flagged], y=[p.achieved_tflops for p in flagged],
                        mode="markers+text", name="faster than its floor (>100% of light)",
                        text=["> 100% of light"] * len(flagged), textposition="top center",
                        textfont=dict(color="#d62728"), hoverinfo="skip",
                        marker=dict(size=24, symbol="circle-open", color="#d62728", line=dict(width=3)))
    ys = [p.achieved_tflops for p in pts]
    y_lo = min([data.peak_tflops / 1e3] + [y / 3 for y in ys])
    fig.update_xaxes(type="log", title="arithmetic intensity (FLOP/byte)", range=[_log10(lo), _log10(hi)])
    fig.update_yaxes(type="log", title="achieved TFLOP/s", range=[_log10(y_lo), _log10(data.peak_tflops * 3)])
    _layout(fig, title=f"roofline on {plot(data.gpu)} ({plot(data.kind)}, {plot(data.precision)})", height=460)
    return fig


def _log10(v: float) -> float:
    import math

    return math.log10(v)


#: The profiled PD request's TTFT parts (``disagg.records.ProfiledTimeline``), in order, with their colours.
PD_PARTS: tuple[tuple[str, str, str], ...] = (
    ("prefill_step_ms", "prefill server", "#4c78a8"), ("xfer_ms", "NIXL transfer", "#e45756"),
    ("decode_first_step_ms", "decode server, first step", "#54a24b"),
    ("other_ms", "rest (HTTP, scheduling)", "#b0b0b0"),
)


def pd_timeline(t: Any) -> go.Figure:
    """One horizontal stacked bar: the profiled request's TTFT laid out over both traces and the connector
    (``ProfiledTimeline``: prefill steps, NIXL transfer, the decode server's first step, the rest), each part
    in ms as ``phaseprof analyze`` prints it (``disagg.render.timeline_cents``: the parts add up to the TTFT in
    the title); the hover adds the steps' GPU busy time."""
    from phaseprof.disagg.render import timeline_cents  # noqa: PLC0415

    cents = timeline_cents(t)
    busy = {"prefill_step_ms": f"{t.prefill_steps} step(s), GPU busy {t.prefill_gpu_ms:,.2f} ms",
            "decode_first_step_ms": f"GPU busy {t.decode_first_gpu_ms:,.2f} ms"
            + ("" if t.decode_first_step_tokens is None else f", {t.decode_first_step_tokens} token(s)")}
    fig = go.Figure()
    y = [f"request #{t.request}"]
    for field, name, colour in PD_PARTS:
        v = cents[field]
        fig.add_bar(y=y, x=[v], name=name if v is not None else f"{name} (not counted)", orientation="h",
                    marker_color=colour, text=[f"{v:,.2f} ms" if v is not None else ""], textposition="inside",
                    insidetextanchor="middle", textangle=0, hoverinfo="text+name",
                    hovertext=[f"{v:,.2f} ms" + (f" · {busy[field]}" if field in busy else "")
                               if v is not None else "not counted"])
    fig.update_layout(barmode="stack", xaxis_title="ms", uniformtext=dict(minsize=10, mode="hide"),
                      legend=dict(orientation="h", yanchor="top", y=-0.6, x=0, traceorder="normal"))
    _layout(fig, title=f"Profiled request #{t.request} (under the profiler): TTFT {cents['ttft_ms']:,.2f} ms",
            height=230)
    fig.update_layout(margin=dict(b=90))
    return fig
