"""phaseprof dashboard: navigation only. Start it with ``phaseprof dashboard [RUNS_DIR]``.

This file is the Streamlit script (``streamlit run`` executes it as ``__main__``); importing it draws nothing.
Each page lives in ``phaseprof/dashboard/views/<page>.py`` and has ``render(st, ctx)``; every number it shows
comes from phaseprof's library (the same functions the CLI calls), loaded through the caches in ``data.py``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from phaseprof.dashboard import widgets
from phaseprof.dashboard.data import Context
from phaseprof.dashboard.text import code
from phaseprof.dashboard.views import breakdown, compare, disagg, memory, pareto, ranks, runs, sweep, timeline

#: Page name -> ``render(st, ctx)``, in sidebar order.
PAGES: dict[str, Callable[[Any, Context], None]] = {
    "Runs": runs.render, "Breakdown": breakdown.render, "Timeline": timeline.render, "Compare": compare.render,
    "Sweep": sweep.render, "Pareto": pareto.render, "PD": disagg.render, "Ranks": ranks.render,
    "Memory": memory.render,
}


def main() -> None:
    import streamlit as st

    st.set_page_config(page_title="phaseprof", page_icon="⏱", layout="wide")
    ctx = widgets.context(sys.argv[1:])
    wanted = st.query_params.get("page")
    if "page" not in st.session_state:
        st.session_state["page"] = wanted if wanted in PAGES else "Runs"
    if "current_run" not in st.session_state and st.query_params.get("run"):
        st.session_state["current_run"] = st.query_params["run"]  # a link to one run: ?page=Breakdown&run=KEY
    if st.session_state.get("goto") in PAGES:  # a page asked to switch (e.g. "open in Breakdown")
        st.session_state["page"] = st.session_state.pop("goto")
    st.sidebar.title("phaseprof")
    page = st.sidebar.radio("Page", list(PAGES), key="page")
    st.query_params["page"] = page
    st.sidebar.caption(f"runs: {code(ctx.runs_dir)}")
    widgets.guarded(st, PAGES[page], ctx)


if __name__ == "__main__":
    main()
