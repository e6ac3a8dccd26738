"""Runs: every run directory, trace and breakdown under the runs directory, with filters; add or upload more."""

from __future__ import annotations

from typing import Any

import pandas as pd

from phaseprof.dashboard import data, widgets
from phaseprof.dashboard.sources import ADDED_PATHS, Source, added_key, file_source, resolve_user_path, save_upload
from phaseprof.dashboard.text import code, md, short
from phaseprof.errors import PhaseprofError

FILTERS = ("GPU", "model", "phase", "mode", "kind")
#: The runs table shows every row up to this height (px; Streamlit's default shows about 10 rows).
TABLE_ROW_PX, TABLE_MAX_PX = 35, 1200
#: Session-state key of the last "Analyse" click's failures (their one-line messages) and how many were tried.
FAILED = "_analyse_failed"
#: A disaggregated (PD) run's status: its two engines' breakdowns are not one run's (the PD page shows them).
PD_STATUS = "PD run: see the PD page"
#: A run that kept only its record (run.json; no trace, no breakdown.json): ``records.RecordOnly`` says the rest.
RECORD_STATUS = "record only: nothing to analyse"


def _row(src: Source, ctx: data.Context) -> dict[str, Any]:
    """A Runs-table row. Stored breakdowns are read (cheap); raw traces only once analysed."""
    status = "ok"
    bd = data.cached_breakdown(src)
    run = None
    if isinstance(bd, str):
        status, bd = f"error: {bd}", None
    try:
        run = data.run_json(src, ctx.roots)
        if bd is None and src.breakdown is not None and status == "ok":
            bd = data.breakdown(src, ctx.roots)
        elif bd is None and status == "ok":
            status = (PD_STATUS if run is not None and run.kind == "pd" else
                      RECORD_STATUS if data.record_only(src, ctx.roots) is not None else "not analysed yet")
    except PhaseprofError as e:
        status = f"error: {widgets.one_line(e)}"
    row = list(data.facts(src, bd, run).items())
    at = next(i for i, (k, _) in enumerate(row) if k == "TPOT ms") + 1  # what bounds it, next to its timings
    row.insert(at, ("bound", bound(bd, run) if bd is not None else None))
    return {**dict(row), "status": status}


def bound(bd: Any, run: Any) -> str:
    """What bounds each phase (``analysis.verdict``: host-, wait- or GPU-bound), e.g. "prefill GPU-bound, decode
    host-bound": the breakdown's stored verdicts, else the verdicts of its numbers."""
    from phaseprof.analysis.verdict import verdicts_of

    v = bd.verdicts if bd.verdicts is not None else verdicts_of(bd, run=run)
    return ", ".join(f"{p.phase} {p.bound}" for p in v.phases)


def _record_only(src: Source | None, ctx: data.Context) -> Any:
    """The current run as a run that kept only its record (``data.record_only``), else None (a run.json that
    does not read: the table's status column says why)."""
    try:
        return data.record_only(src, ctx.roots) if src is not None else None
    except PhaseprofError:
        return None


def _select(st: Any) -> None:
    # on_select callback: runs before the rerun, so the run picker sees the new choice.
    rows = st.session_state["runs_table"].selection.rows
    keys = st.session_state.get("_runs_table_keys", [])
    if rows and rows[0] < len(keys):
        st.session_state["current_run"] = keys[rows[0]]


def _add(st: Any, ctx: data.Context) -> None:
    with st.expander("Add a trace or breakdown", expanded=False):
        st.caption(f"By path (only files under {code(ctx.runs_dir)}), or upload (max {ctx.max_upload_mb} MB; kept in "
                   "this server's temporary upload folder).")
        text = st.text_input("Path under the runs directory", key="add_path",
                             placeholder="e.g. my-traces/rank0.pt.trace.json.gz")
        if st.button("Add", key="add_button") and text:
            try:
                p = resolve_user_path(text, ctx.roots)
                if not p.is_file():
                    raise PhaseprofError("not a file", path=p)
                file_source(p, p.name)  # readable, and a trace or a breakdown
                added = st.session_state.setdefault(ADDED_PATHS, [])
                if str(p) not in added:
                    added.append(str(p))
                st.session_state["current_run"] = added_key(p, ctx.roots)
                data.rescan()
                st.success(f"Added {md(p.name)}: it is now the current run (see Breakdown).")
            except (PhaseprofError, OSError) as e:
                st.error(md(widgets.one_line(e)))
        files = st.file_uploader("Upload traces (.json / .json.gz) or breakdown JSON", type=["json", "gz"],
                                 accept_multiple_files=True, key="uploads",
                                 help=f"At most {ctx.max_upload_mb} MB each (phaseprof dashboard --max-upload-mb).")
        done = st.session_state.setdefault("_uploaded", {})  # file_id -> message: each upload is stored once
        for f in files or []:
            if f.file_id not in done:
                if f.size > ctx.max_upload_mb * 1024 * 1024:
                    done[f.file_id] = (f"{short(f.name)}: {f.size / 1e6:,.0f} MB is over the "
                                       f"{ctx.max_upload_mb} MB upload cap")
                else:
                    try:
                        dest = save_upload(f.name, f.getvalue(), ctx.roots.upload_dir)
                        st.session_state["current_run"] = "upload/" + dest.name
                        data.rescan()
                        done[f.file_id] = ""
                    except (PhaseprofError, OSError) as e:
                        done[f.file_id] = widgets.one_line(e)
            if done[f.file_id]:
                st.error(md(done[f.file_id]))
            else:
                st.caption(f"uploaded {md(short(f.name))}")


def render(st: Any, ctx: data.Context) -> None:
    st.title("Runs")
    _add(st, ctx)
    srcs = data.sources(ctx)
    if not srcs:
        st.info(f"No runs, traces or breakdowns under {code(ctx.runs_dir)}. Capture one with `phaseprof capture`, "
                "or add one above.")
        return
    # Only traces: a PD run has none of its own, nor has a run that kept only its record.
    todo = [s for s in srcs if s.has_trace and s.breakdown is None and data.cached_breakdown(s) is None]
    if todo and st.button(f"Analyse the {len(todo)} trace(s) not analysed yet", key="analyse_all"):
        bar = st.progress(0.0, text="analysing…")
        failed = []
        for i, s in enumerate(todo, 1):
            try:
                data.breakdown(s, ctx.roots)
            except PhaseprofError as e:
                failed.append(widgets.one_line(e))  # the message names the file
            bar.progress(i / len(todo), text=f"{i}/{len(todo)}: {md(s.key)}")
        st.session_state[FAILED] = (failed, len(todo))
        st.rerun()  # drawn again with every row filled, and the button gone (or counting what is left)
    failed, tried = st.session_state.get(FAILED, ([], 0))
    if failed:  # one folded box, one line per file (the table's status column says it too)
        with st.expander(f"{len(failed)} of {tried} could not be analysed", expanded=False):
            st.markdown("\n".join(f"- {md(line)}" for line in failed))
    df = pd.DataFrame([_row(s, ctx) for s in srcs])
    cols = st.columns(len(FILTERS) + 1)
    mask = pd.Series(True, index=df.index)
    for c, name in zip(cols, FILTERS):
        options = sorted({str(v) for v in df[name].dropna()})
        chosen = c.multiselect(name, options, key=f"filter_{name}")
        if chosen:
            mask &= df[name].astype(str).isin(chosen)
    text = cols[-1].text_input("name contains", key="filter_text")
    if text:
        mask &= df["run"].str.contains(text, case=False, regex=False)
    shown = df[mask].reset_index(drop=True)
    st.session_state["_runs_table_keys"] = shown["run"].tolist()
    st.caption(f"{len(shown)} of {len(df)} under {code(ctx.runs_dir)} · click a column to sort, a row to make it "
               "the current run")
    text_cols = [c for c in shown.columns if not pd.api.types.is_numeric_dtype(shown[c])]
    st.dataframe(shown.fillna({c: "" for c in text_cols}), hide_index=True, width="stretch",  # no "None" cells
                 **widgets.EMPTY_CELLS,
                 height=min(TABLE_ROW_PX * (len(shown) + 1) + 3, TABLE_MAX_PX), on_select=lambda: _select(st),
                 selection_mode="single-row", key="runs_table",
                 column_config={"TTFT ms": st.column_config.NumberColumn(format="%.2f"),
                                "TPOT ms": st.column_config.NumberColumn(format="%.2f")})
    cur = widgets.pick(st, srcs, title="Current run", state="current_run")
    only = _record_only(cur, ctx)
    if only is not None:
        widgets.run_record(st, only, key="runs_record")
    c1, c2, c3 = st.columns(3)
    if c1.button("Open in Breakdown", key="open_breakdown"):
        st.session_state["goto"] = "Breakdown"
        st.rerun()
    for col, side in ((c2, "A"), (c3, "B")):
        if col.button(f"Use as {side} in Compare", key=f"use_{side.lower()}") and cur:
            st.session_state[f"cmp_{side.lower()}"] = cur.key
            col.caption(f"{side} = {md(cur.key)}")
