"""Breakdown: one run's phases by bucket (kernel or module view), its steps, and its top and unknown kernels."""

from __future__ import annotations

from typing import Any

import pandas as pd

from phaseprof.analysis.results import Breakdown, KernelStat, PhaseSummary, StepRow
from phaseprof.dashboard import charts, data, widgets
from phaseprof.dashboard.text import md, plot

DEFAULT_STEP_METRICS = ("wall ms", "GPU busy ms", "launch overhead ms", "kernels", "launch calls")
#: A CPU-only trace's work items are CPU ops and it launches nothing: its tables say so (the page
#: opened on a CPU run in GPU words, "GPU busy", "launch overhead 0.00").
CPU_DEFAULT_STEP_METRICS = ("wall ms", "GPU busy ms", "kernels")
CPU_WORDS = (("GPU busy", "CPU op time"), ("GPU idle", "between ops"), ("kernels", "ops"))
CPU_DROPPED = ("launch overhead", "launch calls", "graph launches", "GPU allocations", "device mallocs",
               "memcpys", "other idle")


def in_words_of(df: pd.DataFrame, device: str) -> pd.DataFrame:
    """``df`` as a CPU-only trace is read: GPU words renamed (``CPU_WORDS``), launch and device columns, which
    mean nothing there, dropped (``CPU_DROPPED``); a GPU trace's table as it is."""
    if device != "cpu":
        return df
    keep = [c for c in df.columns if not any(c.startswith(d) for d in CPU_DROPPED)]

    def word(c: str) -> str:
        for gpu, cpu in CPU_WORDS:
            c = c.replace(gpu, cpu)
        return c

    return df[keep].rename(columns={c: word(c) for c in keep})


def phase_table(bd: Breakdown) -> pd.DataFrame:
    """Per phase: per-step means first, then totals over its steps (``PhaseSummary`` fields as stored; ms)."""
    rows = []
    for ph in bd.phases:
        s = ph.per_step
        rows.append({
            "phase": ph.phase, "steps": ph.steps, "wall ms/step": s["wall_us"].mean / 1e3,
            "GPU busy ms/step": s["gpu_busy_us"].mean / 1e3, "GPU idle ms/step": s["gpu_idle_us"].mean / 1e3,
            "launch overhead ms/step": s["launch_overhead_us"].mean / 1e3,
            "host work ms/step": s["host_work_us"].mean / 1e3, "busy % (mean/step)": s["busy_pct"].mean,
            "kernels/step": s["kernels"].mean, "launch calls/step": s["launch_calls"].mean,
            "allocations/step": s["allocations"].mean, "device mallocs/step": s["device_mallocs"].mean,
            "wall ms (total)": ph.wall_us / 1e3, "GPU busy ms (total)": ph.gpu_busy_us / 1e3,
            "GPU idle ms (total)": ph.gpu_idle_us / 1e3, "launch overhead ms (total)": ph.idle.launch_overhead_us / 1e3,
            "host work ms (total)": ph.idle.host_work_us / 1e3, "other idle ms (total)": ph.idle.other_us / 1e3,
        })
    return pd.DataFrame(rows)


def step_table(rows: list[StepRow]) -> pd.DataFrame:
    """One row per step, every count and time as in the breakdown's step rows (times in ms)."""
    apis = sorted({a for r in rows for a in r.launches.by_api})
    out = []
    for r in rows:
        out.append({
            "step": r.index, "phase": r.phase, "context tokens": r.context_tokens,
            "generation tokens": r.generation_tokens, "wall ms": r.wall_us / 1e3, "GPU busy ms": r.gpu_busy_us / 1e3,
            "GPU idle ms": r.gpu_idle_us / 1e3, "busy %": r.busy_pct,
            "launch overhead ms": r.idle.launch_overhead_us / 1e3,
            "host work ms": r.idle.host_work_us / 1e3, "other idle ms": r.idle.other_us / 1e3, "kernels": r.kernels,
            "launch calls": r.launches.total, **{a: r.launches.by_api.get(a, 0) for a in apis},
            "graph launches": r.launches.graph_launches, "allocations": r.memory.allocations,
            "GPU allocations": r.memory.gpu_allocations, "device mallocs": r.memory.device_mallocs,
            "memcpys": r.memcpy_count, "label": r.label,
        })
    return pd.DataFrame(out)


def bucket_table(ph: PhaseSummary, steps: list[StepRow], view: str) -> pd.DataFrame:
    """Per bucket, then per idle cause (and neighbouring steps' work), of the phase's mean step
    (``analysis.digest.step_parts``): ms per step, % of the step's wall time, % of GPU busy (buckets), items per
    step; and the bucket's total over the steps."""
    from phaseprof.analysis.digest import step_parts

    rows = {b.bucket: b for b in (ph.kernel_view if view == "kernel" else ph.module_view)}
    return pd.DataFrame([{"part": p.name, "ms/step": p.ms_per_step, "% of step": p.pct_of_wall,
                          "% of GPU busy": rows[p.name].share_pct if p.kind == "busy" else None,
                          "items/step": p.items_per_step if p.kind == "busy" else None,
                          "ms (total)": rows[p.name].time_us / 1e3 if p.kind == "busy" else None}
                         for p in step_parts(ph, steps, view=view)])


def kernel_table(ks: list[KernelStat]) -> pd.DataFrame:
    return pd.DataFrame([{"kernel": k.name, "bucket": k.bucket, "module": k.module, "count": k.count,
                          "ms (total)": k.time_us / 1e3, "share %": k.share_pct} for k in ks])


def _top_kernels(st: Any, ph: PhaseSummary) -> None:
    st.subheader(f"Top kernels per bucket: {md(ph.phase)}")
    for b in ph.kernel_view:
        ks = ph.top_kernels.get(b.bucket, [])
        if not ks:
            continue
        with st.expander(f"{md(b.bucket)}: {b.time_us / 1e3:,.2f} ms over {ph.steps} step(s), "
                         f"{b.share_pct:.1f}% of GPU busy",
                         expanded=b.bucket == "unknown"):
            widgets.table(st, kernel_table(ks), key=f"top_{ph.phase}_{b.bucket}")


def _unknown(st: Any, bd: Breakdown) -> None:
    if not bd.unknown_kernels:
        st.success("Every kernel matched a classification rule (no 'unknown' bucket).")
        return
    time = {p.phase: next((b.time_us for b in p.kernel_view if b.bucket == "unknown"), 0.0) for p in bd.phases}
    spent = ", ".join(f"{md(ph)}: {us / 1e3:,.2f} ms" for ph, us in time.items() if us)
    st.warning(f"{len(bd.unknown_kernels)} kernel name(s) matched no rule (bucket 'unknown'; {spent}). "
               "Add a rule with `phaseprof analyze --rules my.toml`.")
    widgets.table(st, kernel_table(bd.unknown_kernels).rename(columns={"kernel": "unclassified kernel"}),
                  key="unknown_kernels")


def sol_table(sol: Any) -> pd.DataFrame:
    """Per phase and bucket: work, achieved throughput, binding resource and the speed-of-light floor."""
    return pd.DataFrame([{"phase": ph.phase, "bucket": b.bucket, "GFLOP": b.flops / 1e9, "GB": b.bytes / 1e9,
                          "TFLOP/s": b.achieved_tflops, "TB/s": b.achieved_tbps, "bound": b.bound,
                          "floor ms": b.floor_us / 1e3, "measured ms": b.time_us / 1e3,
                          "% of light": b.pct_of_light} for ph in sol.phases for b in ph.buckets])


def coverage_table(bd: Breakdown) -> pd.DataFrame:
    """Per phase: % of GPU busy time whose module view each attribution method gave (rows sum to 100)."""
    a = bd.attribution
    return pd.DataFrame([{"phase": ph.phase, **{f"{m} %": v for m, v in ph.coverage_pct.items()}}
                         for ph in (a.phases if a else [])])


def layer_table(bd: Breakdown, phase: str) -> pd.DataFrame:
    """Per decoder layer of ``phase``: type, GPU time and share, and ms per module-view bucket."""
    a = bd.attribution
    ph = next((p for p in (a.phases if a else []) if p.phase == phase), None)
    buckets = sorted({b for r in (ph.layers if ph else []) for b in r.by_bucket_us})
    return pd.DataFrame([{"layer": r.layer, "type": r.layer_type, "ms": r.time_us / 1e3, "share %": r.share_pct,
                          **{f"{b} ms": r.by_bucket_us.get(b, 0.0) / 1e3 for b in buckets}}
                         for r in (ph.layers if ph else [])])


def layer_heatmap(layers: pd.DataFrame, phase: str) -> Any:
    """Layers x buckets, ms: one row per decoder layer (labelled with its type), one column per bucket."""
    import plotly.graph_objects as go

    cols = [c for c in layers.columns if c.endswith(" ms") and c != "ms"]
    names = [plot(f"{int(r.layer)} {r.type}") for r in layers.itertuples()]
    fig = go.Figure(go.Heatmap(z=layers[cols].to_numpy(), x=[plot(c[:-3]) for c in cols], y=names,
                               colorscale="Viridis", colorbar=dict(title="ms"),
                               hovertemplate="layer %{y}<br>%{x}: %{z:.2f} ms<extra></extra>"))
    # Every layer labelled: left to itself plotly labels every other row (the attention layers 3, 7, ... of a
    # hybrid model went unnamed).
    fig.update_layout(title=f"{plot(phase)}: time per decoder layer and bucket (ms)",
                      height=max(300, 140 + 20 * len(layers)), margin=dict(l=10, r=10, t=80, b=10),
                      yaxis=dict(autorange="reversed", type="category", tickmode="array", tickvals=names,
                                 ticktext=names, tickfont=dict(size=11)),
                      xaxis=dict(side="top"))  # the buckets' names above 40 rows, where the eye starts
    return fig


def routing_heatmap(sol: Any) -> Any:
    """Phases x MoE layers: the hottest expert's load over the balanced load (``SolMoeLayer.max_over_mean``),
    measured routing only; the hover adds distinct experts, Gini and the hottest experts."""
    import plotly.graph_objects as go

    phases = list(dict.fromkeys(r.phase for r in sol.moe_layers))
    layers = sorted({r.layer for r in sol.moe_layers})
    at = {(r.phase, r.layer): r for r in sol.moe_layers}
    z = [[at[(ph, i)].max_over_mean if (ph, i) in at else None for i in layers] for ph in phases]
    hover = [[plot(f"distinct experts {at[(ph, i)].distinct_experts:,.1f}, Gini {at[(ph, i)].gini:.2f}, hottest "
                   f"{', '.join(map(str, at[(ph, i)].hottest[:4]))}") if (ph, i) in at else "" for i in layers]
             for ph in phases]
    fig = go.Figure(go.Heatmap(z=z, x=layers, y=[plot(ph) for ph in phases], customdata=hover, colorscale="Reds",
                               colorbar=dict(title="max/mean"),
                               hovertemplate="%{y}, MoE layer %{x}: hottest expert %{z:.2f}x the balanced load"
                                             "<br>%{customdata}<extra></extra>"))
    fig.update_layout(title="MoE routing (measured): hottest expert's load over the balanced load, per layer",
                      height=160 + 40 * len(phases), margin=dict(l=10, r=10, t=60, b=40),
                      xaxis=dict(title="MoE layer", tickmode="linear", dtick=1 if len(layers) <= 48 else 4),
                      yaxis=dict(type="category"))
    return fig


def _attribution(st: Any, bd: Breakdown, phase: str) -> None:
    a = bd.attribution
    if a is None:
        return
    st.subheader("Attribution")
    st.caption(f"mode: {md(a.mode)} ({md(a.mode_evidence)}); graph replay: {md(a.graph_alignment)}")
    widgets.table(st, coverage_table(bd), key="coverage_table")
    layers = layer_table(bd, phase)
    if layers.empty:
        st.caption("no per-layer view: the trace has no nn.Module events (record it with_stack)")
        return
    widgets.chart(st, layer_heatmap(layers, phase), key="layer_heatmap")
    widgets.table(st, layers, key="layer_table")


def _speed_of_light(st: Any, src: Any, bd: Breakdown, roots: Any) -> None:
    from phaseprof.sol.render import ceiling_line

    st.subheader("Speed of light")
    sol = data.speed_of_light(src, bd, roots)
    if isinstance(sol, data._Failed):
        st.warning(md(sol.message))
        return
    if not sol.ok:
        why = f" ({md('; '.join(sol.notes))})" if sol.notes else ""  # not "… traces ()"
        st.caption(f"no speed-of-light numbers: {md(sol.status)}{why}")
        return
    st.caption(md(ceiling_line(sol)))
    widgets.chart(st, charts.roofline(sol), key="roofline")
    for ph in sol.phases:
        for b in ph.buckets:
            if b.beats_floor:
                st.warning(f"{md(ph.phase)}: {md(b.bucket)} ran faster than its floor ({b.pct_of_light:,.0f}% of "
                           f"light, which no kernel can): the floor's assumption broke: {md(b.beats_floor)}")
    no_flops = sorted({f"{b.bucket} ({ph.phase})" for ph in sol.phases for b in ph.buckets
                       if b.time_us > 0 and b.flops == 0})
    if no_flops:
        st.caption(f"Not on the roofline (no FLOPs, bandwidth only; see TB/s in the table): {md(', '.join(no_flops))}")
    widgets.table(st, sol_table(sol), key="sol_table")
    if sol.moe_layers:  # the capture recorded its MoE routing (routing.npz)
        widgets.chart(st, routing_heatmap(sol), key="routing_heatmap")
        st.caption("Distinct experts, Gini and the hottest experts per layer: `phaseprof analyze RUN --by layer`.")


def render(st: Any, ctx: data.Context) -> None:
    st.title("Breakdown")
    src = widgets.current(st, ctx)
    if src is None:
        return
    if src.trace is None and src.breakdown is None and data.is_pd(src, ctx.roots):
        st.info(f"{md(src.key)} is a disaggregated (PD) run: its prefill and decode servers' breakdowns are on "
                "the PD page.")
        if st.button("Open on the PD page", key="bd_open_pd"):
            st.session_state["pd_run"] = src.key
            st.session_state["goto"] = "PD"
            st.rerun()
        return
    only = data.record_only(src, ctx.roots)
    if only is not None:  # nothing to break down: what the record holds instead
        st.markdown(f"**{md(src.key)}**")
        widgets.run_record(st, only, key="bd_record")
        return
    bd = data.breakdown(src, ctx.roots)
    f = data.facts(src, bd, data.run_json(src, ctx.roots))
    what = " · ".join(md(str(f[k])) for k in ("model", "mode") if f[k] is not None)
    tokens = f"{f['tokens']:,} prompt tokens" if isinstance(f["tokens"], int) else ""
    st.markdown(widgets.source_line(src, bd) + "".join(f" · {x}" for x in (what, tokens) if x))
    st.caption(f"steps: {md(bd.step_detection.get('detail', ''))}")
    if not bd.phases:
        st.warning("No steps with work in this trace: nothing to break down.")
        return
    widgets.verdicts(st, data.verdicts(src, bd, ctx.roots))
    clean = {k: f[k] for k in ("TTFT ms", "TPOT ms") if f[k] is not None}
    if clean:
        cols = st.columns(4)
        for c, (k, v) in zip(cols, clean.items()):
            c.metric(k.replace(" ms", " (clean, ms)"), f"{v:,.2f}")
    c1, c2 = st.columns(2)
    view = c1.radio("View", ["kernel", "module"], horizontal=True, key="bd_view",
                    help="kernel: what each kernel is; module: which model component launched it")
    unit = c2.radio("Bar length", ["ms", "%"], horizontal=True, key="bd_unit",
                    format_func=lambda u: "ms per step" if u == "ms" else "% of the step")
    widgets.chart(st, charts.phase_buckets(bd, view=view, unit=unit), key="phase_buckets")
    widgets.table(st, in_words_of(phase_table(bd), bd.trace.device), key="phase_table")
    phases = [p.phase for p in bd.phases]
    default = "decode" if "decode" in phases else phases[0]
    ph_name = st.selectbox("Phase", phases, index=phases.index(default), key="bd_phase")
    ph = next(p for p in bd.phases if p.phase == ph_name)
    widgets.table(st, bucket_table(ph, bd.steps, view), key="bucket_table")
    st.subheader("Per step")
    widgets.table(st, in_words_of(step_table(bd.steps), bd.trace.device), key="step_table")
    rows = [r for r in bd.steps if r.phase == ph_name]
    if len(rows) < 2:
        st.caption(f"{md(ph_name)} has {len(rows)} step: no per-step chart (its numbers are in the table above).")
    else:
        cpu = bd.trace.device == "cpu"
        options = [m for m in charts.STEP_METRICS if not (cpu and any(m.startswith(d) for d in CPU_DROPPED))]
        metrics = st.multiselect("Per-step chart", options,
                                 default=list(CPU_DEFAULT_STEP_METRICS if cpu else DEFAULT_STEP_METRICS),
                                 key="bd_metrics")
        if metrics:
            widgets.chart(st, charts.per_step(rows, metrics, title=f"{plot(ph_name)} steps"), key="per_step")
    _top_kernels(st, ph)
    _attribution(st, bd, ph_name)
    _speed_of_light(st, src, bd, ctx.roots)
    st.subheader("Unknown kernels")
    _unknown(st, bd)
    for n in bd.notes:
        st.caption(f"note: {md(n)}")
    from phaseprof.report.json_io import dumps
    from phaseprof.report.markdown import breakdown_markdown

    report = breakdown_markdown(bd)
    with st.expander("Markdown (as `phaseprof analyze --format markdown`)"):
        st.code(report, language="markdown")
    st.download_button("Download breakdown JSON", dumps(bd), file_name=f"{src.name}.breakdown.json",
                       mime="application/json", key="dl_json")
