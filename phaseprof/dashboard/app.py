"""phaseprof dashboard: navigation only. Start it with ``phaseprof dashboard [RUNS_DIR]``.

Each page lives in ``dashboards/views/<page>.py`` and has ``render(st, ctx)``; every number it shows comes
from phaseprof's library (the same functions the CLI calls), loaded through the caches in ``data.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

_REPO = Path(__file__).resolve().parents[1]
if str(_REPO) not in sys.path:  # `streamlit run dashboards/app.py` puts only dashboards/ on the path
    sys.path.insert(0, str(_REPO))

import streamlit as st  # noqa: E402

from phaseprof.dashboard import widgets  # noqa: E402
from phaseprof.dashboard.views import breakdown, compare, ranks, runs, sweep, timeline  # noqa: E402


def _memory(st_: object, ctx: object) -> None:
    try:
        from phaseprof.dashboard.views import memory
    except ImportError:
        st.info("The Memory page is not part of this checkout yet (dashboards/views/memory.py).")
        return
    widgets.call_with(memory.render, st_, {"ctx": ctx, "runs_dir": ctx.runs_dir, "roots": ctx.roots})


PAGES = {"Runs": runs.render, "Breakdown": breakdown.render, "Timeline": timeline.render,
         "Compare": compare.render, "Sweep": sweep.render, "Ranks": ranks.render, "Memory": _memory}


def main() -> None:
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
    st.sidebar.caption(f"runs: `{ctx.runs_dir}`")
    widgets.guarded(st, PAGES[page], ctx)


main()
