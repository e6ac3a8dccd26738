"""Timeline: one step drawn in time (``phaseprof.analysis.timeline.step_timeline``), zoomable to a time window,
and exportable as a small trace file (``phaseprof.analysis.step_export``) for Perfetto UI or HTA."""

from __future__ import annotations

from typing import Any

import pandas as pd

from phaseprof.analysis.step_export import export_name
from phaseprof.dashboard import charts, data, widgets
from phaseprof.dashboard.text import md

#: The table under the chart lists this many of the step's largest idle gaps.
GAP_ROWS = 25


def _default_step(bd: Any) -> int:
    """The first decode step if there is one (the interesting case for launch overhead), else step 0."""
    return next((r.index for r in bd.steps if r.phase == "decode"), bd.steps[0].index)


def gap_table(tl: Any) -> pd.DataFrame:
    g = tl.gaps
    if g.empty:
        return pd.DataFrame()
    g = g.assign(ns=g["end_ns"] - g["ts_ns"]).nlargest(GAP_ROWS, "ns")
    return pd.DataFrame({
        "starts at µs": (g["ts_ns"] - tl.start_ns) / 1e3, "idle µs": g["ns"] / 1e3,
        "cause": g["cause"].map(charts.IDLE_LABELS),
        "in launch calls µs": g["launch_overhead_ns"] / 1e3, "host work µs": g["host_work_ns"] / 1e3,
        "queued/tail µs": g["other_ns"] / 1e3,
    })


def _wanted_window(text: str | None, wall_us: float) -> tuple[float, float]:
    """``?zoom=A:B`` (µs since the step's start) clipped to the step; the whole step when absent or bad."""
    try:
        a, b = (float(x) for x in (text or "").split(":"))
    except ValueError:
        return 0.0, wall_us
    a, b = max(0.0, a), min(wall_us, b)
    return (a, b) if b > a else (0.0, wall_us)


def zoom(st: Any, tl: Any) -> tuple[float, float] | None:
    """The time window chosen on the slider (µs since the step's start), None for the whole step. A link can
    open a window: ``?page=Timeline&step=N&zoom=A:B``."""
    wall_us = tl.wall_ns / 1e3
    if wall_us <= 0:
        return None
    resolution = 1.0 if wall_us >= 1000 else 0.01
    key = f"tl_zoom_{tl.step}"
    if key not in st.session_state:
        st.session_state[key] = _wanted_window(st.query_params.get("zoom"), float(wall_us))
    lo, hi = st.slider("Zoom: time window (µs since step start)", min_value=0.0, max_value=float(wall_us),
                       step=resolution, key=key,
                       help="Drag either end to draw only that part of the step (the export below follows it).")
    return None if (lo, hi) == (0.0, float(wall_us)) else (float(lo), float(hi))


def render(st: Any, ctx: data.Context) -> None:
    st.title("Timeline")
    src = widgets.current(st, ctx, need_trace=True)
    if src is None:
        return
    bd = data.breakdown(src, ctx.roots)
    st.markdown(widgets.source_line(src, bd))
    if not bd.steps:
        st.warning("No steps found in this trace.")
        return
    labels = {r.index: f"{r.index}: {r.phase} · wall {r.wall_us / 1e3:,.2f} ms · {r.label[:60]}" for r in bd.steps}
    wanted = st.query_params.get("step")
    if "tl_step" not in st.session_state or st.session_state["tl_step"] not in labels:
        st.session_state["tl_step"] = int(wanted) if wanted and wanted.isdigit() and int(wanted) in labels \
            else _default_step(bd)
    step = st.selectbox("Step", list(labels), format_func=labels.get, key="tl_step")
    row = bd.steps[step]
    verdict = next((v for v in data.verdicts(src, bd, ctx.roots).phases if v.phase == row.phase), None)
    if verdict is not None:  # what this step's phase is bound by, before its drawing
        getattr(st, widgets.VERDICT_BOX.get(verdict.bound, "info"))(md(verdict.line))
    tl = data.step_timeline(src, ctx.roots, step)
    cols = st.columns(6)
    for c, (name, v) in zip(cols, (("wall ms", row.wall_us), ("GPU busy ms", row.gpu_busy_us),
                                    ("idle: in launch calls ms", row.idle.launch_overhead_us),
                                    ("idle: host work ms", row.idle.host_work_us),
                                    ("idle: queued / tail ms", row.idle.other_us), ("kernels", row.kernels))):
        c.metric(name, f"{v / 1e3:,.2f}" if isinstance(v, float) else f"{v:,}")
    color_by = st.radio("Colour kernels by", ["kernel_bucket", "module_bucket"], horizontal=True, key="tl_color",
                        format_func=lambda c: c.split("_")[0] + " view")
    window = zoom(st, tl)
    if max(len(tl.activities), len(tl.host_calls), len(tl.idle)) > charts.MAX_TIMELINE_BARS:
        st.caption(f"Large step: only the {charts.MAX_TIMELINE_BARS:,} longest bars of each layer (in the zoom "
                   "window) are drawn.")
    widgets.chart(st, charts.timeline(tl, color_by=color_by, window_us=window), key="timeline")
    what = f"µs {window[0]:,.0f} to {window[1]:,.0f} of step {step}" if window else f"step {step}"
    st.download_button(f"Export {what} as a trace file", data=lambda: data.step_export(src, ctx.roots, step,
                                                                                        window).data,
                       file_name=export_name(src.trace or src.path, step, window), mime="application/gzip",
                       key="tl_export", on_click="ignore", icon=":material/download:",
                       help="The trace's own events of this step's host window (GPU work launched in it kept "
                            "whole), as a .pt.trace.json.gz: opens in Perfetto UI (ui.perfetto.dev), "
                            "chrome://tracing and HTA's TraceAnalysis, and with `phaseprof analyze`.")
    lanes = tl.activities["lane"].nunique() if len(tl.activities) else 0
    st.caption(f"{len(tl.activities):,} work items on {lanes} lane(s), {len(tl.host_calls):,} host API calls, "
               f"{len(tl.gaps):,} idle gaps. Idle causes: *in launch calls* = next work not launched yet while "
               "the host was inside a launch API; *host work* = not launched yet, host busy elsewhere; "
               "*queued / tail* = launched but not started, or after the step's last kernel.")
    st.subheader(f"Largest idle gaps (up to {GAP_ROWS})")
    widgets.table(st, gap_table(tl), key="gap_table")
