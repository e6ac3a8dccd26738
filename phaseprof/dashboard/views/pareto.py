"""Pareto: decode sweeps under the runs directory through ``phaseprof pareto`` (``pareto.build``): the frontier
of tokens/s per GPU vs tokens/s per user across configurations, each point's speed-of-light point and capacity
wall, and the profiled runs behind points a click away on the Breakdown page.

Nothing is computed here: the chart and tables show the ``ParetoReport`` that ``build_report`` returns for the
chosen sweeps, profiled runs (``match_profiled``) and ceilings, as ``phaseprof pareto`` prints it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pandas as pd
import streamlit as st_cache

from phaseprof.dashboard import data, frontier
from phaseprof.dashboard.sources import Kind, guard
from phaseprof.dashboard.text import code, md
from phaseprof.errors import PhaseprofError
from phaseprof.pareto.records import ParetoReport
from phaseprof.records import RunDir
from phaseprof.safe_text import plotly_figure

CHART = "pareto_chart"
_KEYS = "_pareto_point_runs"  # point index -> run key of its breakdown (for the chart's click)


def _digest(files: list[Path]) -> str:
    return "+".join(data.sha256_of(f) for f in files if f.is_file())


@st_cache.cache_data(show_spinner=False, ttl=5)
def _decode_sweeps(runs_dir: str, uploads: str, files: tuple[str, ...]) -> tuple[list[frontier.DecodeSweep],
                                                                                    list[str]]:
    from phaseprof.dashboard.sources import Roots

    roots = Roots(runs_dir=Path(runs_dir), upload_dir=Path(uploads))
    found, bad = [], []
    for f in files:
        try:
            s = frontier.decode_sweep(Path(f), roots)
        except PhaseprofError as e:
            bad.append(str(e).splitlines()[0])
            continue
        if s is not None:
            found.append(s)
    return found, bad


@st_cache.cache_data(show_spinner=False, ttl=5)
def _ceilings(runs_dir: str, uploads: str) -> list[tuple[str, str]]:
    from phaseprof.dashboard.sources import Roots

    return frontier.ceilings_files(Roots(runs_dir=Path(runs_dir), upload_dir=Path(uploads)))


@st_cache.cache_data(show_spinner=False, max_entries=32)
def _matching(sweep_dirs: tuple[str, ...], runs: tuple[str, ...], digest: str) -> tuple[list[str], list[str]]:
    """(runs that ``match_profiled`` places on a point of these sweeps, a set of them that fits together:
    each point profiled by one run)."""
    from phaseprof.pareto.build import match_profiled, read_sweeps

    sweeps, _ = read_sweeps(list(sweep_dirs))
    fits, chosen = [], []
    for r in runs:
        try:
            match_profiled(sweeps, [r])
        except PhaseprofError:
            continue
        fits.append(r)
        try:
            match_profiled(sweeps, [*chosen, r])
            chosen.append(r)
        except PhaseprofError:
            pass
    return fits, chosen


@st_cache.cache_data(show_spinner=False, max_entries=32)
def _report(sweep_dirs: tuple[str, ...], runs: tuple[str, ...], ceilings: str | None,
            digest: str) -> ParetoReport | str:
    """``phaseprof pareto SWEEP... --profiled RUN... [--ceilings FILE]``'s report, or its one-line error."""
    from phaseprof.pareto.build import build_report, match_profiled, read_sweeps

    try:
        sweeps, labels = read_sweeps(list(sweep_dirs))
        return build_report(sweeps, labels, list(sweep_dirs), ceilings=ceilings,
                            profiled=match_profiled(sweeps, list(runs)))
    except PhaseprofError as e:
        return str(e).splitlines()[0]


def _open_clicked(st: Any) -> None:
    """The chart's on_select: a click on a point with a profiled run opens it on the Breakdown page."""
    event = st.session_state.get(CHART)
    points = (event or {}).get("selection", {}).get("points", []) if isinstance(event, dict) else \
        getattr(getattr(event, "selection", None), "points", []) or []
    keys = st.session_state.get(_KEYS, [])
    for pt in points:
        cd = pt.get("customdata")
        idx = cd[0] if isinstance(cd, list) and cd else cd
        if isinstance(idx, int) and 0 <= idx < len(keys) and keys[idx]:
            st.session_state["current_run"] = keys[idx]
            st.session_state["goto"] = "Breakdown"
            return


def _table(st: Any, rows: list[dict[str, Any]], *, key: str, links: bool = False) -> None:
    """Times in ms with 2 decimals, tokens/s with 1, % of light whole; with ``links`` the breakdown column is a
    link to the Breakdown page."""
    df = pd.DataFrame(rows)
    cfg: dict[str, Any] = {}
    for c in df.columns:
        if c.endswith(" ms"):
            cfg[c] = st.column_config.NumberColumn(format="%.2f")
        elif c.startswith("tok/s") or c.startswith("output tok/s"):
            cfg[c] = st.column_config.NumberColumn(format="%.1f")
        elif c == "% of light":
            cfg[c] = st.column_config.NumberColumn(format="%.0f%%")
    if links:  # the link shows the run's key (the part after run=), and opens its Breakdown page
        cfg["breakdown"] = st.column_config.LinkColumn("breakdown", display_text=r"run=(.*)$")
    text_cols = [c for c in df.columns if not pd.api.types.is_numeric_dtype(df[c])]
    st.dataframe(df.fillna({c: "" for c in text_cols}), hide_index=True, width="stretch", key=key,
                 column_config=cfg)


def render(st: Any, ctx: data.Context) -> None:
    st.title("Pareto")
    found, bad = _decode_sweeps(str(ctx.runs_dir), str(ctx.roots.upload_dir), tuple(map(str, data.sweeps(ctx))))
    for b in bad:
        st.error(md(b))
    if not found:
        st.info(f"No decode sweep with serving metrics under {code(ctx.runs_dir)}. Run e.g. `phaseprof sweep "
                "--phase decode --tokens 1024 --output-tokens 128 --concurrency 1,4,16,64,256` and reload.")
        return
    asked = [s for k in st.query_params.get_all("sweep") for s in found if s.key == k]
    workloads = sorted({s.workload for s in found}, key=lambda w: tuple(int(x) for x in w.split("/")))
    first = asked[0].workload if asked else frontier.default_workload(found)
    workload = st.radio("Workload (prompt / output tokens)", workloads, index=workloads.index(first),
                        horizontal=True, key="pareto_workload",
                        format_func=lambda w: f"{w} ({sum(s.workload == w for s in found)} sweeps)")
    by_key = {s.key: s for s in found if s.workload == workload}
    default = [s.key for s in asked if s.key in by_key] or [k for k, s in by_key.items() if s.points > 1] \
        or list(by_key)[:1]
    chosen = st.multiselect("Decode sweeps (one configuration each)", list(by_key), default=default,
                            key=f"pareto_sweeps_{workload}", help="Every sweep.json of phase decode with serving "
                            "metrics under the runs directory, of this workload. Default: those with more than "
                            "one point.")
    if not chosen:
        return
    sweep_dirs = tuple(str(by_key[k].directory) for k in chosen)
    sweep_files = [Path(d) / "sweep.json" for d in sweep_dirs]

    candidates = {}
    for src in data.sources(ctx):
        if src.kind != Kind.RUN or src.breakdown is None or src.run_json is None:
            continue
        try:
            if frontier.is_profiled_candidate(data.run_json(src, ctx.roots)):
                candidates[str(guard(src.path, ctx.roots))] = src.key
        except PhaseprofError:
            continue
    run_files = [RunDir(Path(r)).record_file for r in candidates]
    fits, fitting = _matching(sweep_dirs, tuple(candidates), _digest(sweep_files + run_files))
    key_of = {r: candidates[r] for r in fits}
    c1, c2 = st.columns([3, 2])
    runs = c1.multiselect("Profiled runs (`pareto --profiled`)", [key_of[r] for r in fits],
                          default=[key_of[r] for r in fitting], key="pareto_profiled",
                          help="Decode run directories with a breakdown that match a point of the chosen sweeps "
                          "(model, mode, weights, server, prompt length, concurrency).")
    run_dirs = tuple(r for r in fits if key_of[r] in runs)

    files = _ceilings(str(ctx.runs_dir), str(ctx.roots.upload_dir))
    gpu_of = dict(files)
    asked_c = st.query_params.get("ceilings")
    options = [frontier.AUTO, *gpu_of, frontier.SPEC]
    pre = asked_c if asked_c in options else frontier.AUTO
    ceil = c2.selectbox("Ceilings for the speed-of-light floor", options, index=options.index(pre),
                        key="pareto_ceilings", format_func=lambda k: "datasheet (gpus.toml)" if k == frontier.SPEC
                        else "the GPU's baseline (as `pareto`)" if k == frontier.AUTO
                        else f"{k} (measured on {gpu_of[k]})",
                        help="Default: each GPU's one baseline, as `phaseprof pareto` without --ceilings (the "
                        "measured ceilings phaseprof ships for that GPU, else its datasheet). Or a measured file "
                        "(phaseprof ceilings) in a ceilings/ folder under the runs directory, or the datasheet.")
    fixed = ceil in (frontier.SPEC, frontier.AUTO)
    ceil_path = None if ceil == frontier.AUTO else ceil if fixed else str(guard(ctx.runs_dir / ceil, ctx.roots))
    with st.spinner("Building the frontier…"):
        report = _report(sweep_dirs, run_dirs, ceil_path,
                         _digest(sweep_files + [RunDir(Path(r)).record_file for r in run_dirs]
                                 + ([] if fixed else [Path(ceil_path)])))
    if isinstance(report, str):
        raise PhaseprofError(report)

    short = frontier.short_labels([c.config for c in report.configs])
    keys = [frontier.run_key(p.breakdown, ctx.runs_dir) for p in report.points]
    st.session_state[_KEYS] = keys
    log_axes = st.toggle("log axes", value=True, key="pareto_log")
    fig = frontier.frontier_figure(report, short, ctx.runs_dir, log_axes=log_axes)
    # widgets.chart's net (safe_text.plotly_figure), with the chart's click selection on.
    import plotly.graph_objects as go

    st.plotly_chart(go.Figure(plotly_figure(fig.to_plotly_json())), key=CHART, on_select=lambda: _open_clicked(st),
                    selection_mode="points")
    legend = [f"**{md(short[c.config])}** = {md(c.config)}" for c in report.configs if short[c.config] != c.config]
    st.caption(" · ".join([*legend, "◆ a profiled point (click it to open its breakdown), ringed: on the frontier, "
                           "dotted: to the point's speed-of-light floor, ✕: over the capacity wall"])
               + ". tok/s per GPU: " + md(report.tps_per_gpu_definition) + "; tok/s per user: "
               + md(report.tps_per_user_definition) + ".")
    notes = [f"{md(short[c.config])}: {md(n)}" for c in report.configs for n in (c.capacity_note, c.sol_note) if n]
    if notes:  # why a configuration has no capacity wall or no floor
        st.caption("; ".join(notes))

    profiled = [(i, k) for i, k in enumerate(keys) if k]
    if profiled:
        b1, b2 = st.columns([3, 1])
        pick = b1.selectbox("Profiled point", [i for i, _ in profiled], key="pareto_point",
                            format_func=lambda i: f"{short[report.points[i].config]} c={report.points[i].concurrency}"
                            f": {keys[i]}")
        if b2.button("Open in Breakdown", key="pareto_open"):
            st.session_state["current_run"] = keys[pick]
            st.session_state["goto"] = "Breakdown"
            st.rerun()

    st.subheader("Frontier")
    st.caption("The points no other point beats on both axes, by tokens/s per user: which configuration wins "
               "where.")
    _table(st, frontier.frontier_rows(report, short, ctx.runs_dir), key="pareto_frontier", links=True)
    with st.expander("Every point", expanded=False):
        _table(st, frontier.point_rows(report, short, ctx.runs_dir), key="pareto_points")
    with st.expander("Configurations", expanded=False):
        _table(st, frontier.config_rows(report, short, ctx.runs_dir), key="pareto_configs")
    st.download_button("Download pareto JSON", msgspec.json.format(msgspec.json.encode(report), indent=2),
                       file_name="pareto.json", mime="application/json", key="pareto_json")
