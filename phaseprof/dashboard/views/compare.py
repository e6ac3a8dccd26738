"""Compare: two runs side by side through ``phaseprof diff``'s own functions (and its PR-comment markdown)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from phaseprof.dashboard import charts, data, widgets
from phaseprof.dashboard.sources import Source
from phaseprof.dashboard.text import code, md
from phaseprof.errors import PhaseprofError
from phaseprof.presets import preset_of_dir
from phaseprof.records import RunRecord


def cli_label(src: Source) -> str:
    """The name ``phaseprof diff`` gives an input (so the markdown here is the CLI's, byte for byte)."""
    p = src.path
    return p.name if p.name not in ("breakdown.json", "trace.json.gz") else f"{p.parent.name}/{p.name}"


def model_label(model: str | None, capture: RunRecord | None) -> tuple[str | None, str | None]:
    """The model as the user named it (a preset, a repo id) and, only as detail, the local config directory
    the engine loaded (run.json's ``model.path``, e.g. ``/tmp/phaseprof-presets/<preset>-<digest>``). A side
    that recorded only that directory is named by the preset it materializes, else by its last part."""
    path = capture.model.path if capture else None
    name = model
    if name and name.startswith(("/", "~", "./", "../")):  # a directory, not a name (repo ids have no leading /)
        path = path or name
        name = preset_of_dir(name) or Path(name.rstrip("/")).name or name
    return name, (str(path) if path and path != name else None)


#: What a like-for-like pair shares (from each run's record or breakdown, as the Runs table shows it).
PAIR_KEYS = ("model", "phase", "tokens")
#: Aspects that name a side in the chart's legend when they differ, in this order (the first differing ones).
NAMING_ASPECTS = ("mode", "GPU", "quant", "model", "tokens")


def like_for_like(rows: list[dict[str, Any]]) -> tuple[str, str] | None:
    """The default pair (run keys) among Runs-table rows: two runs of the same model, phase and tokens, on the
    same GPU when there is such a pair, differing in mode when they can (eager vs graph: the question a pair of
    captures usually answers); None when no two rows share model, phase and tokens."""
    best: tuple[int, int, int] | None = None
    pair = None
    for i, a in enumerate(rows):
        for j in range(i + 1, len(rows)):
            b = rows[j]
            if any(a.get(k) is None or a.get(k) != b.get(k) for k in PAIR_KEYS):
                continue
            same = [a.get(k) == b.get(k) for k in ("GPU", "quant")]  # one difference at a time: mode, else GPU
            score = (int(same[0]), int(same[1]), int(a.get("mode") != b.get("mode")), -j)
            if best is None or score > best:
                best, pair = score, (a["run"], b["run"])
    if pair is None:
        return None
    a, b = (r for r in rows if r["run"] in pair)
    if str(b.get("mode")).startswith("eager") and not str(a.get("mode")).startswith("eager"):
        a, b = b, a  # eager is the baseline, graph the candidate
    return a["run"], b["run"]


def differing(d: Any, quants: tuple[str | None, str | None] = (None, None)) -> list[tuple[str, str, str]]:
    """(aspect, A's value, B's value) of every aspect among ``NAMING_ASPECTS`` where the sides differ: ``diff``'s
    comparability checks, and the weights' quantization the captures recorded (``quants``; diff checks none)."""
    found = {c.aspect: (c.aspect, c.a, c.b) for c in d.comparability if c.status == "differs"}
    if None not in quants and quants[0] != quants[1]:
        found["quant"] = ("quant", str(quants[0]), str(quants[1]))
    return [found[k] for k in NAMING_ASPECTS if k in found]


def differences(d: Any, quants: tuple[str | None, str | None] = (None, None)) -> tuple[str, str] | None:
    """What tells A from B: the sides' values of the first two differing aspects (``differing``):
    ("eager", "graph"), ("eager · NVIDIA H100", "graph · NVIDIA H200"); None when none differs."""
    diff = differing(d, quants)[:2]
    if not diff:
        return None
    return " · ".join(x[1] for x in diff), " · ".join(x[2] for x in diff)


def side_labels(d: Any, a: Source, b: Source, quants: tuple[str | None, str | None] = (None, None)) -> tuple[str, str]:
    """Legend names that say what differs ("A: eager" / "B: graph"), else the inputs' names."""
    diff = differences(d, quants)
    if diff:
        return f"A: {diff[0]}", f"B: {diff[1]}"
    return f"A: {cli_label(a)}", f"B: {cli_label(b)}"


def heading(d: Any, quants: tuple[str | None, str | None] = (None, None)) -> str:
    """The page's heading: what differs between the sides, and the GPU when both ran on the same one
    ("Comparing eager (A) with graph (B) on NVIDIA H200"); the GPUs when nothing recorded differs."""
    diff = differences(d, quants)
    if diff is None or diff[0] == diff[1]:
        return f"Comparing {md(d.a.gpu)} (A) with {md(d.b.gpu)} (B)"
    where = f" on {md(d.a.gpu)}" if d.a.gpu == d.b.gpu else ""
    return f"Comparing {md(diff[0])} (A) with {md(diff[1])} (B){where}"


def side_table(d: Any, a: Source, b: Source, models: tuple[str | None, str | None] = (None, None)) -> pd.DataFrame:
    """What is being compared: each input's identity, then every aspect ``diff`` checks and its verdict
    (the model by name: ``models`` are the sides' ``model_label`` names)."""
    rows = [{"": "input", "A": a.key, "B": b.key, "status": ""},
            {"": "described as", "A": a.description or "–", "B": b.description or "–", "status": ""}]
    rows += [{"": c.aspect, "A": models[0] or c.a if c.aspect == "model" else c.a,
              "B": models[1] or c.b if c.aspect == "model" else c.b, "status": c.status} for c in d.comparability]
    return pd.DataFrame(rows)


def bucket_delta_table(deltas: Any) -> pd.DataFrame:
    return pd.DataFrame([{
        "bucket": x.bucket, "A ms/step": x.time_ms.a, "B ms/step": x.time_ms.b, "Δ ms": x.time_ms.change,
        "Δ %": x.time_ms.rel_pct, "A share %": x.share.a, "B share %": x.share.b, "Δ share pp": x.share.change,
        "A items/step": x.count.a, "B items/step": x.count.b,
    } for x in deltas])


def metric_table(deltas: Any) -> pd.DataFrame:
    """Per-step metrics named as ``phaseprof diff`` names them (``diff_markdown.METRIC_LABELS``: "wall ms/step",
    not ``wall_ms``), times with 2 decimals, shares and counts with 1."""
    from phaseprof.report.diff_markdown import METRIC_LABELS  # noqa: PLC0415

    def r(v: float | None, unit: str) -> float | None:
        return None if v is None else round(v, 2 if unit == "ms" else 1)

    return pd.DataFrame([{"metric": METRIC_LABELS.get(m.metric, m.metric), "unit": m.unit, "A": r(m.a, m.unit),
                          "B": r(m.b, m.unit), "Δ": r(m.change, m.unit),
                          "Δ %": None if m.rel_pct is None else round(m.rel_pct, 1)} for m in deltas])


def kernel_table(matches: Any) -> pd.DataFrame:
    return pd.DataFrame([{
        "bucket": m.bucket if m.b_bucket is None else f"{m.bucket} → {m.b_bucket}",
        "module": m.module if m.b_module is None else f"{m.module} → {m.b_module}", "matched by": m.how,
        "A kernel": m.a.name if m.a else None, "A ms/step": m.a.ms_per_step if m.a else None,
        "A calls/step": m.a.calls_per_step if m.a else None,
        "B kernel": m.b.name if m.b else None, "B ms/step": m.b.ms_per_step if m.b else None,
        "B calls/step": m.b.calls_per_step if m.b else None,
    } for m in matches])


def _side_line(side: str, src: Source, s: Any, model: tuple[str | None, str | None], quant: str | None = None) -> str:
    """One input in markdown: every name from the trace, the run or the disk escaped."""
    name, path = model
    shown = f"**{md(name)}**" if name else "not recorded"
    line = (f"**{side}** = {code(src.key)} on **{md(s.gpu)}** ({md(s.platform)}/{md(s.device)}) · "
            f"model: {shown} · mode: {md(s.mode) if s.mode else 'not recorded'}"
            + (f" · quant: {md(quant)}" if quant else ""))
    if path:
        line += f"  \n&nbsp;&nbsp;&nbsp;model config: {code(path)}"
    if src.description:
        line += f"  \n&nbsp;&nbsp;&nbsp;{md(src.description)}"
    return line


def _what(st: Any, d: Any, a: Source, b: Source, models: tuple[tuple[str | None, str | None], ...],
          quants: tuple[str | None, str | None]) -> None:
    st.markdown(_side_line("A", a, d.a, models[0], quants[0]))
    st.markdown(_side_line("B", b, d.b, models[1], quants[1]))
    warnings = list(d.warnings) + [f"quant differs: {x[1]} (A) vs {x[2]} (B)" for x in differing(d, quants)
                                   if x[0] == "quant"]
    if warnings:
        st.warning("Not like for like: " + "; ".join(md(w) for w in warnings) + ".")
    unknown = [c.aspect for c in d.comparability if c.status == "unknown"]
    if unknown:
        st.info(f"Not recorded on at least one side, so not checked: {md(', '.join(unknown))}.")
    if a.description and b.description and a.description != b.description:
        st.warning("A and B are different workloads by their descriptions (model, parallelism or phase may "
                   "differ, see above): read the deltas as a comparison of two workloads, not a like-for-like "
                   "speed-up.")
    with st.expander("Comparability checks (what diff compared)"):
        widgets.table(st, side_table(d, a, b, (models[0][0], models[1][0])), key="cmp_sides")


def _default_pair(srcs: list[Source], ctx: data.Context) -> tuple[str | None, str | None]:
    """``like_for_like`` among the sources whose breakdown needs no analysis (stored, or analysed already)."""
    rows = []
    for s in srcs:
        bd = data.cached_breakdown(s)
        try:
            if bd is None and s.breakdown is not None:
                bd = data.breakdown(s, ctx.roots)
            if bd is not None and not isinstance(bd, str):
                rows.append(data.facts(s, bd, data.run_json(s, ctx.roots)))
        except PhaseprofError:
            continue
    return like_for_like(rows) or (None, None)


def render(st: Any, ctx: data.Context) -> None:
    st.title("Compare")
    srcs = data.sources(ctx)
    if len(srcs) < 2:
        st.info("Compare needs two runs, traces or breakdowns (add them on the Runs page).")
        return
    qp = st.query_params
    pair = (None, None) if qp.get("a") or "cmp_a" in st.session_state else _default_pair(srcs, ctx)
    c1, c2 = st.columns(2)
    a = widgets.pick(st, srcs, title="A (baseline)", state="cmp_a", default=qp.get("a") or pair[0], where=c1)
    rest_default = qp.get("b") or pair[1] or next((s.key for s in srcs if s.key != a.key), None)
    b = widgets.pick(st, srcs, title="B (candidate)", state="cmp_b", default=rest_default, where=c2)
    from phaseprof.report.diff import diff_breakdowns

    bd_a, bd_b = data.breakdown(a, ctx.roots), data.breakdown(b, ctx.roots)
    d = diff_breakdowns(bd_a, bd_b, order_a=data.kernel_order(a, ctx.roots), order_b=data.kernel_order(b, ctx.roots),
                        labels=(cli_label(a), cli_label(b)))
    quants = (data.quant(data.run_json(a, ctx.roots) or bd_a.capture),
              data.quant(data.run_json(b, ctx.roots) or bd_b.capture))
    st.subheader(heading(d, quants))
    _what(st, d, a, b, (model_label(d.a.model, bd_a.capture), model_label(d.b.model, bd_b.capture)), quants)
    labels = side_labels(d, a, b, quants)
    cols = st.columns(2)
    for col, label, src, bd in zip(cols, labels, (a, b), (bd_a, bd_b)):
        widgets.verdicts(col, data.verdicts(src, bd, ctx.roots), title=f"What to look at first, {md(label)}")
    if d.timings:
        widgets.table(st, metric_table(d.timings), key="cmp_timings")
    if not d.phases:
        st.warning(f"No phase in common: A has {md(', '.join(d.a.phases) or 'none')}, "
                   f"B has {md(', '.join(d.b.phases) or 'none')}.")
    else:
        names = [p.phase for p in d.phases]
        c1, c2 = st.columns(2)
        ph_name = c1.selectbox("Phase", names, key="cmp_phase")
        view = c2.radio("View", ["kernel", "module"], horizontal=True, key="cmp_view")
        ph = d.phase(ph_name)
        rows = ph.kernel_view if view == "kernel" else ph.module_view
        st.caption(f"{md(ph_name)}: A has {ph.a_steps} step(s), B {ph.b_steps}; times are per step (mean), shares "
                   "are % of the phase's GPU busy time.")
        widgets.chart(st, charts.compare_buckets(rows, labels=labels, view=view,
                                               phase=ph_name), key="cmp_bars")
        st.subheader("Delta by bucket")
        widgets.table(st, bucket_delta_table(rows), key="cmp_buckets")
        st.subheader("Per-step metrics")
        widgets.table(st, metric_table(ph.metrics), key="cmp_metrics")
        if ph.launches_by_api:
            with st.expander("Launch calls per step, by API"):
                widgets.table(st, metric_table(ph.launches_by_api), key="cmp_apis")
        st.subheader("Kernels matched")
        st.caption("The same kernel name first, whichever bucket or module each side gave it (A → B), then by "
                   "order in the step (or time rank) within one bucket and module.")
        widgets.table(st, kernel_table(ph.kernels), key="cmp_kernels")
    if d.only_in_a or d.only_in_b:
        st.caption(f"Only in A: {md(', '.join(d.only_in_a) or '–')} · only in B: "
                   f"{md(', '.join(d.only_in_b) or '–')}")
    try:
        from phaseprof.report.diff_markdown import diff_markdown
    except ImportError:
        st.info("The diff markdown renderer is not in this checkout yet.")
        return
    report = diff_markdown(d)
    with st.expander("Markdown for a PR (same as `phaseprof diff A B --format markdown`)"):  # long: folded
        st.code(report, language="markdown", wrap_lines=True)
    st.download_button("Download markdown", report, file_name="phaseprof-diff.md", mime="text/markdown", key="dl_md")
