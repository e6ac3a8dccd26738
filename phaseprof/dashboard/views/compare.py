"""Compare: two runs side by side through ``phaseprof diff``'s own functions (and its PR-comment markdown)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from phaseprof.dashboard import charts, data, widgets
from phaseprof.dashboard.sources import Source


def cli_label(src: Source) -> str:
    """The name ``phaseprof diff`` gives an input (so the markdown here is the CLI's, byte for byte)."""
    p = src.path
    return p.name if p.name not in ("breakdown.json", "trace.json.gz") else f"{p.parent.name}/{p.name}"


def side_table(d: Any, a: Source, b: Source) -> pd.DataFrame:
    """What is being compared: each input's identity, then every aspect ``diff`` checks and its verdict."""
    rows = [{"": "input", "A": a.key, "B": b.key, "status": ""},
            {"": "described as", "A": a.description or "–", "B": b.description or "–", "status": ""}]
    rows += [{"": c.aspect, "A": c.a, "B": c.b, "status": c.status} for c in d.comparability]
    return pd.DataFrame(rows)


def bucket_delta_table(deltas: Any) -> pd.DataFrame:
    return pd.DataFrame([{
        "bucket": x.bucket, "A ms/step": x.time_ms.a, "B ms/step": x.time_ms.b, "Δ ms": x.time_ms.change,
        "Δ %": x.time_ms.rel_pct, "A share %": x.share.a, "B share %": x.share.b, "Δ share pp": x.share.change,
        "A items/step": x.count.a, "B items/step": x.count.b,
    } for x in deltas])


def metric_table(deltas: Any) -> pd.DataFrame:
    return pd.DataFrame([{"metric": m.metric, "unit": m.unit, "A": m.a, "B": m.b, "Δ": m.change, "Δ %": m.rel_pct}
                         for m in deltas])


def kernel_table(matches: Any) -> pd.DataFrame:
    return pd.DataFrame([{
        "bucket": m.bucket, "module": m.module, "matched by": m.how,
        "A kernel": m.a.name if m.a else None, "A ms/step": m.a.ms_per_step if m.a else None,
        "A calls/step": m.a.calls_per_step if m.a else None,
        "B kernel": m.b.name if m.b else None, "B ms/step": m.b.ms_per_step if m.b else None,
        "B calls/step": m.b.calls_per_step if m.b else None,
    } for m in matches])


def _what(st: Any, d: Any, a: Source, b: Source) -> None:
    st.markdown(f"**A** = `{a.key}` on **{d.a.gpu}** ({d.a.platform}/{d.a.device}) · model: "
                f"{d.a.model or 'not recorded'} · mode: {d.a.mode or 'not recorded'}"
                + (f"  \n&nbsp;&nbsp;&nbsp;{a.description}" if a.description else ""))
    st.markdown(f"**B** = `{b.key}` on **{d.b.gpu}** ({d.b.platform}/{d.b.device}) · model: "
                f"{d.b.model or 'not recorded'} · mode: {d.b.mode or 'not recorded'}"
                + (f"  \n&nbsp;&nbsp;&nbsp;{b.description}" if b.description else ""))
    if d.warnings:
        st.warning("Not like for like: " + "; ".join(d.warnings) + ".")
    unknown = [c.aspect for c in d.comparability if c.status == "unknown"]
    if unknown:
        st.info(f"Not recorded on at least one side, so not checked: {', '.join(unknown)}.")
    if a.description and b.description and a.description != b.description:
        st.warning("A and B are different workloads by their descriptions (model, parallelism or phase may "
                   "differ, see above): read the deltas as a comparison of two workloads, not a like-for-like "
                   "speed-up.")
    with st.expander("Comparability checks (what diff compared)"):
        widgets.table(st, side_table(d, a, b), key="cmp_sides")


def render(st: Any, ctx: data.Context) -> None:
    st.title("Compare")
    srcs = data.sources(ctx)
    if len(srcs) < 2:
        st.info("Compare needs two runs, traces or breakdowns (add them on the Runs page).")
        return
    qp = st.query_params
    c1, c2 = st.columns(2)
    a = widgets.pick(st, srcs, title="A (baseline)", state="cmp_a", default=qp.get("a"), where=c1)
    rest_default = qp.get("b") or next((s.key for s in srcs if s.key != a.key), None)
    b = widgets.pick(st, srcs, title="B (candidate)", state="cmp_b", default=rest_default, where=c2)
    from phaseprof.report.diff import diff_breakdowns

    bd_a, bd_b = data.breakdown(a, ctx.roots), data.breakdown(b, ctx.roots)
    d = diff_breakdowns(bd_a, bd_b, order_a=data.kernel_order(a, ctx.roots), order_b=data.kernel_order(b, ctx.roots),
                        labels=(cli_label(a), cli_label(b)))
    st.subheader(f"Comparing {d.a.gpu} (A) with {d.b.gpu} (B)")
    _what(st, d, a, b)
    if d.timings:
        widgets.table(st, metric_table(d.timings), key="cmp_timings")
    if not d.phases:
        st.warning(f"No phase in common: A has {', '.join(d.a.phases) or 'none'}, "
                   f"B has {', '.join(d.b.phases) or 'none'}.")
    else:
        names = [p.phase for p in d.phases]
        c1, c2 = st.columns(2)
        ph_name = c1.selectbox("Phase", names, key="cmp_phase")
        view = c2.radio("View", ["kernel", "module"], horizontal=True, key="cmp_view")
        ph = d.phase(ph_name)
        rows = ph.kernel_view if view == "kernel" else ph.module_view
        st.caption(f"{ph_name}: A has {ph.a_steps} step(s), B {ph.b_steps}; times are per step (mean), shares "
                   "are % of the phase's GPU busy time.")
        st.plotly_chart(charts.compare_buckets(rows, labels=(f"A: {d.a.gpu}", f"B: {d.b.gpu}"), view=view,
                                               phase=ph_name), key="cmp_bars")
        st.subheader("Delta by bucket")
        widgets.table(st, bucket_delta_table(rows), key="cmp_buckets")
        st.subheader("Per-step metrics")
        widgets.table(st, metric_table(ph.metrics), key="cmp_metrics")
        if ph.launches_by_api:
            with st.expander("Launch calls per step, by API"):
                widgets.table(st, metric_table(ph.launches_by_api), key="cmp_apis")
        st.subheader("Kernels matched within each bucket")
        st.caption("Paired by bucket, module and order in the step (or time rank), never by name alone.")
        widgets.table(st, kernel_table(ph.kernels), key="cmp_kernels")
    if d.only_in_a or d.only_in_b:
        st.caption(f"Only in A: {', '.join(d.only_in_a) or '–'} · only in B: {', '.join(d.only_in_b) or '–'}")
    try:
        from phaseprof.report.diff_markdown import diff_markdown
    except ImportError:
        st.info("The diff markdown renderer is not in this checkout yet.")
        return
    st.subheader("Markdown for a PR (same as `phaseprof diff A B --format markdown`)")
    md = diff_markdown(d)
    st.code(md, language="markdown")
    st.download_button("Download markdown", md, file_name="phaseprof-diff.md", mime="text/markdown", key="dl_md")
