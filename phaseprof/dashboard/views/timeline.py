"""Timeline: one step drawn in time (``phaseprof.analysis.timeline.step_timeline``)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from phaseprof.dashboard import charts, data, widgets

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
    labels = {r.index: f"{r.index}: {r.phase} · wall {r.wall_us:,.1f} µs · {r.label[:60]}" for r in bd.steps}
    wanted = st.query_params.get("step")
    if "tl_step" not in st.session_state or st.session_state["tl_step"] not in labels:
        st.session_state["tl_step"] = int(wanted) if wanted and wanted.isdigit() and int(wanted) in labels \
            else _default_step(bd)
    step = st.selectbox("Step", list(labels), format_func=labels.get, key="tl_step")
    row = bd.steps[step]
    tl = data.step_timeline(src, ctx.roots, step)
    cols = st.columns(6)
    for c, (name, v) in zip(cols, (("wall µs", row.wall_us), ("GPU busy µs", row.gpu_busy_us),
                                    ("idle: in launch calls µs", row.idle.launch_overhead_us),
                                    ("idle: host work µs", row.idle.host_work_us),
                                    ("idle: queued / tail µs", row.idle.other_us), ("kernels", row.kernels))):
        c.metric(name, f"{v:,.1f}" if isinstance(v, float) else f"{v:,}")
    color_by = st.radio("Colour kernels by", ["kernel_bucket", "module_bucket"], horizontal=True, key="tl_color",
                        format_func=lambda c: c.split("_")[0] + " view")
    if max(len(tl.activities), len(tl.host_calls), len(tl.idle)) > charts.MAX_TIMELINE_BARS:
        st.caption(f"Large step: only the {charts.MAX_TIMELINE_BARS:,} longest bars of each layer are drawn.")
    st.plotly_chart(charts.timeline(tl, color_by=color_by), key="timeline")
    lanes = tl.activities["lane"].nunique() if len(tl.activities) else 0
    st.caption(f"{len(tl.activities):,} work items on {lanes} lane(s), {len(tl.host_calls):,} host API calls, "
               f"{len(tl.gaps):,} idle gaps. Idle causes: *in launch calls* = next work not launched yet while "
               "the host was inside a launch API; *host work* = not launched yet, host busy elsewhere; "
               "*queued / tail* = launched but not started, or after the step's last kernel.")
    st.subheader(f"Largest idle gaps (up to {GAP_ROWS})")
    widgets.table(st, gap_table(tl), key="gap_table")
