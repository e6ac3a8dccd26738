"""The "Ranks" page: a multi-GPU run's rank traces side by side (``phaseprof analyze DIR`` as a page).

A rank set is a directory under the runs directory holding two or more trace files (vLLM's profiler writes one
per TP/EP rank). Numbers come from ``phaseprof.scale.ranks.analyze_ranks``, the function the CLI calls.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from phaseprof.scale.ranks import RankSummary, analyze_ranks, find_trace_files
from phaseprof.dashboard import data, widgets
from phaseprof.dashboard.sources import guard
from phaseprof.dashboard.text import code, md
from phaseprof.errors import PhaseprofError

_RANK_FILE = re.compile(r"rank\d+")


def rank_sets(runs_dir: Path) -> list[Path]:
    """Directories under ``runs_dir`` with two or more per-rank trace files (named ``...rank<N>...``, as vLLM's
    profiler and phaseprof's capture name them); loose unrelated traces in one folder are not a rank set."""
    out = []
    for d in sorted(p for p in [runs_dir, *runs_dir.rglob("*")] if p.is_dir() and not p.name.startswith(".")):
        try:
            files = find_trace_files(d)
        except PhaseprofError:
            continue
        if sum(bool(_RANK_FILE.search(f.name)) for f in files) >= 2:
            out.append(d)
    return out


def _summary(paths: tuple[str, ...], shas: tuple[str, ...]) -> RankSummary:
    # Cached by content hash: switching pages never re-parses the rank traces.
    return analyze_ranks([Path(p) for p in paths])


def rank_table(s: RankSummary) -> pd.DataFrame:
    rows = []
    for r, bd in s.ranks.items():
        top = max((b for ph in bd.phases for b in ph.kernel_view), key=lambda b: b.time_us, default=None)
        rows.append({"rank": r, "GPU": bd.trace.gpu_name, "steps": len(bd.steps),
                     "GPU busy ms": bd.totals["gpu_busy_us"] / 1e3,
                     "communication %": s.communication_share_pct[r],
                     "comm overlapped %": s.communication_overlap_pct[r],
                     "top bucket": f"{top.bucket} {top.share_pct:.0f}%" if top else ""})
    return pd.DataFrame(rows)


#: How to read the tables below (``scale.ranks.StepImbalance``, ``RankSummary``).
IMBALANCE_HELP = (
    "Compute = GPU busy minus communication kernels. The slowest rank of a step is the one with the most compute; "
    "the others finish early and spend the difference inside communication kernels waiting for it, so a high "
    "communication % on one rank usually means it waits for another, not that it moves more data. Spread = "
    "slowest minus fastest compute in the step (% of the ranks' mean).")


def wait_table(c: Any) -> pd.DataFrame:
    """Per rank, from ``scale.collectives.CollectiveReport``: time waiting in collectives for the last rank, time
    transferring, how often and by how much it was the last to arrive, and what it was doing then."""
    return pd.DataFrame([{"rank": r, "waited ms": c.wait_us_by_rank[r] / 1e3,
                          "transfer ms": c.transfer_us_by_rank[r] / 1e3, "last to arrive ×": c.late_count_by_rank[r],
                          "late by ms": c.lateness_us_by_rank[r] / 1e3, "why late": c.cause_by_rank[r].main}
                         for r in sorted(c.wait_us_by_rank)])


def imbalance_figure(s: RankSummary) -> Any:
    fig = go.Figure()
    for r in s.ranks:
        fig.add_bar(name=f"rank {r} compute", x=[st.step for st in s.steps],
                    y=[st.compute_us_by_rank[r] / 1e3 for st in s.steps])
        fig.add_bar(name=f"rank {r} communication", x=[st.step for st in s.steps],
                    y=[st.communication_us_by_rank[r] / 1e3 for st in s.steps])
    fig.update_layout(barmode="group", xaxis_title="step", yaxis_title="ms", height=380, template="plotly_white",
                      title="per step and rank: compute (GPU busy minus communication) and communication kernels",
                      legend=dict(orientation="h", yanchor="top", y=-0.2, x=0), margin=dict(l=10, r=10, t=50, b=90))
    return fig


def render(st: Any, ctx: data.Context) -> None:
    st.title("Ranks")
    sets = rank_sets(ctx.runs_dir)
    if not sets:
        st.info(f"No directory with several rank traces under {code(ctx.runs_dir)}. Capture one with "
                "`phaseprof capture --tensor-parallel-size 2` (vLLM's own profiler writes one trace per rank).")
        return
    labels = [d.relative_to(ctx.runs_dir).as_posix() or "." for d in sets]
    wanted = st.query_params.get("ranks")  # a link to one rank set: ?page=Ranks&ranks=DIR
    choice = st.selectbox("rank set", labels, index=labels.index(wanted) if wanted in labels else 0)
    d = sets[labels.index(choice)]
    files = [guard(f, ctx.roots) for f in find_trace_files(d)]
    cached = st.cache_data(show_spinner=False, max_entries=16)(_summary)
    with st.spinner(f"analysing {len(files)} rank traces ..."):
        s = cached(tuple(str(f) for f in files), tuple(data.sha256_of(f) for f in files))
    for w in s.warnings:
        st.warning(md(w))
    st.caption(f"{len(s.ranks)} of world size {s.world_size} ranks · steps found by "
               f"{md(next(iter(s.ranks.values())).step_detection['detail'])}")
    from phaseprof.analysis.verdict import verdicts_of
    from phaseprof.scale.render import WAIT_TERMS
    from phaseprof.scale.waits import rank_verdicts, waterfall_lines

    busy = {r: bd.totals["gpu_busy_us"] for r, bd in s.ranks.items()}
    waiting = rank_verdicts(s.collectives, busy)  # a rank that mostly waits: on whom, not "GPU-bound"
    st.markdown("**What to look at first**")
    for r, bd in s.ranks.items():
        if r in waiting:
            st.info(f"rank {r} · {md(waiting[r])}")
        for v in verdicts_of(bd).phases:
            if r in waiting and v.top_bucket == "communication":
                continue  # its "GPU-bound — communication" is the wait above, not work
            st.info(f"rank {r} · {md(v.line)}")
    st.caption(IMBALANCE_HELP)
    widgets.table(st, rank_table(s), key="rank_table")
    if s.collectives is not None:
        st.subheader("Who waited for whom")
        widgets.table(st, wait_table(s.collectives), key="rank_waits")
        st.caption(f"waited = inside a collective kernel before the last rank arrived; transfer = the rest. "
                   f"{md(s.collectives.clock)}")
        st.markdown("**How the waits add up (ms)**")
        st.code("\n".join(waterfall_lines(s.collectives, busy)), language=None)
        st.caption(md(WAIT_TERMS))
    if s.steps:
        st.subheader("Load imbalance per step")
        widgets.chart(st, imbalance_figure(s), key="rank_imbalance")
        widgets.table(st, pd.DataFrame([{"step": x.step, "slowest rank": x.slowest_rank,
                                         "fastest rank": x.fastest_rank, "spread ms": x.spread_us / 1e3,
                                         "spread %": x.spread_pct} for x in s.steps]), key="rank_steps")
