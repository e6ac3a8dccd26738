"""PD: a disaggregated prefill/decode run (``phaseprof capture --server P --decode-server D``): the handoff's
medians, the profiled request's TTFT laid out over both engines and the connector, every request, and the prefill
and decode servers' breakdowns side by side.

Nothing is computed here: the page shows the ``PdRun`` that ``disagg.run.read_pd_run`` returns (the object
``phaseprof analyze RUN`` prints), its summary as ``disagg.render.summary_lines`` writes it.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from phaseprof.dashboard import charts, data, widgets
from phaseprof.dashboard.sources import ADDED_PATHS, Source, added_key, guard
from phaseprof.dashboard.text import code, md

#: Session-state key of the PD run shown (kept across pages, as ``current_run`` is).
STATE = "pd_run"
TIMELINE = "pd_timeline"
#: The two engines, in the run record's order: (side, heading).
SIDES = (("prefill", "prefill server"), ("decode", "decode server"))


def pd_sources(ctx: data.Context) -> list[Source]:
    """The run directories under the runs directory whose run.json has kind ``pd`` (the scanner's run list,
    every depth it walks)."""
    return [s for s in data.sources(ctx) if data.is_pd(s, ctx.roots)]


def request_table(handoff: Any) -> pd.DataFrame:
    """One row per request of ``handoff.json`` (``HandoffRequest``): prefill, handoff and TTFT in ms as
    ``phaseprof analyze`` prints them (``disagg.render.split_cents``: each row adds up to the cent), MB read by
    the decode server over NIXL (bytes / 1e6)."""
    from phaseprof.disagg.render import split_cents  # noqa: PLC0415

    rows = []
    for q in handoff.requests:
        p, h, t = split_cents(q.prefill_ms, q.ttft_ms)
        rows.append({"request": q.index, "profiled": q.profiled, "prefill ms": p, "handoff ms": h, "TTFT ms": t,
                     "TPOT ms": q.tpot_ms, "NIXL xfer ms": q.nixl.xfer_ms if q.nixl else None,
                     "MB": q.nixl.bytes / 1e6 if q.nixl else None})
    return pd.DataFrame(rows, columns=["request", "profiled", "prefill ms", "handoff ms", "TTFT ms", "TPOT ms",
                                       "NIXL xfer ms", "MB"])


def _open(st: Any, ctx: data.Context, path: str) -> None:
    """Open one engine's stored breakdown on the Breakdown page: added by path, as the Runs page adds a file."""
    p = guard(path, ctx.roots)
    added = st.session_state.setdefault(ADDED_PATHS, [])
    if str(p) not in added:
        added.append(str(p))
    st.session_state["current_run"] = added_key(p, ctx.roots)
    st.session_state["goto"] = "Breakdown"


def _side(st: Any, ctx: data.Context, src: Source, run: Any, side: str, heading: str, view: str) -> None:
    st.subheader(heading)
    bd = getattr(run, side)
    rel = getattr(run.record.disagg, side).breakdown
    if bd is None:
        why = (run.errors.get(side) or "").strip().splitlines()
        st.warning(f"{heading}: no breakdown ({md(why[0] if why else 'none was written')})")
        return
    st.caption(widgets.source_line(Source(key=f"{src.key}/{rel}", kind="breakdown", path=src.path / rel), bd))
    if not bd.phases:
        st.caption("No steps with work in this trace: nothing to break down.")
    else:
        fig = charts.phase_buckets(bd, view=view, unit="ms", title=heading, legend_columns=2)  # a half column
        widgets.chart(st, fig, key=f"pd_{side}_buckets")
    if st.button("Open in Breakdown", key=f"pd_open_{side}", help=f"This engine's {rel} on the Breakdown page"):
        _open(st, ctx, str(src.path / rel))
        st.rerun()


def render(st: Any, ctx: data.Context) -> None:
    st.title("PD")
    srcs = pd_sources(ctx)
    if not srcs:
        st.info(f"No disaggregated (PD) run under {code(ctx.runs_dir)}. Capture one with `phaseprof capture "
                "--server P --decode-server D` (run.json of kind `pd`, handoff.json, prefill/ and decode/).")
        return
    wanted = st.query_params.get("pd")
    if wanted and STATE not in st.session_state:
        st.session_state[STATE] = wanted  # a link to one PD run: ?page=PD&pd=KEY
    src = widgets.pick(st, srcs, title="PD run", state=STATE,
                       help="Run directories whose run.json has kind `pd` (phaseprof capture --decode-server).")
    if src is None:
        return
    run = data.pd_run(src, ctx.roots)
    from phaseprof.disagg.render import summary_lines, timeline_lines

    st.code("\n".join(summary_lines(run.handoff)), language=None)
    st.caption("TTFT split: " + md(run.handoff.ttft_split))

    st.subheader("The profiled request")
    if run.timeline is None:
        st.info(md(timeline_lines(None, run.timeline_note or "not laid out")[0]))
    else:
        widgets.chart(st, charts.pd_timeline(run.timeline), key=TIMELINE)
        with st.expander("As `phaseprof analyze` prints it", expanded=False):
            st.code("\n".join(timeline_lines(run.timeline, run.timeline_note)), language=None)

    st.subheader("Requests")
    st.caption("ms on the proxy's clock; MB: read by the decode server over NIXL; profiled: ran while both "
               "servers' profilers recorded (slower than the timed ones, whose medians are above).")
    widgets.table(st, request_table(run.handoff), key="pd_requests")

    st.subheader("Prefill and decode servers")
    view = st.radio("View", ["kernel", "module"], horizontal=True, key="pd_view",
                    help="kernel: what each kernel is; module: which model component launched it")
    cols = st.columns(2)
    for col, (side, heading) in zip(cols, SIDES):
        with col:
            _side(st, ctx, src, run, side, heading, view)
