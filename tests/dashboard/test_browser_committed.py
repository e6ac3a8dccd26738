"""Every dashboard page in headless Chromium on the committed runs (traces/: the H200 eager and graph prefill and
decode captures, the sweeps, the TP2 rank folder, the CPU run), one server for them all: each page is drawn, shows
what to look at first, and the browser console stays free of errors (plotly.js logged "Invalid color
specifier" on Compare). Screenshots land in test-artifacts/dashboard/committed-*.png; scripts/docs_screenshots.py
takes the same visits for docs/img/.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from phaseprof.dashboard.sources import scan
from tests.conftest import REPO

from .test_browser import ARTIFACTS, _drawn, _serve, _stop, _visit, browser  # noqa: F401 - the Chromium fixture

pytestmark = pytest.mark.browser

RUNS = REPO / "traces"


def _run(mode: str, suffix: str) -> str:
    (d,) = sorted((RUNS / "h200" / mode).glob(f"*-h200-qwen3.5-35b-a3b-{suffix}"))
    return d.relative_to(RUNS).as_posix()


EAGER_PREFILL = _run("eager", "prefill-4096")
EAGER_DECODE = _run("eager", "decode-128in-32out")
GRAPH_PREFILL = _run("graph", "prefill-4096")
GRAPH_DECODE = _run("graph", "decode-128in-32out")
CPU_RUN = "cpu/tiny-hybrid-prefill128-decode8"
RANK_SET = "h200x2/tp2-eager-prefill4096-decode8"
OWN_EAGER = "h200/own-eager/vllm-own-eager-prefill4096-decode1.pt.trace.json.gz"
PD_RUN = "h200/pd/qwen3.5-35b-a3b-fp8-eager-4096in-32out"


@dataclass(frozen=True)
class Visit:
    """One page on one input: its query, the text of its last element, and text it must show."""

    slug: str
    page: str
    query: str
    done: str
    expected: list[str] = field(default_factory=list)
    state: dict[str, str] = field(default_factory=dict)  # selectbox label -> option to choose after loading


FIRST = "What to look at first"
VISITS = [
    # The table is a canvas: its rows are counted, not read (every trace, run and breakdown; no startup.json,
    # summary.json, result.json or ceilings file among them: tests/dashboard/test_safety.py).
    Visit("runs", "Runs", "", "Use as B in Compare", [f"{len(scan(RUNS)[0])} of {len(scan(RUNS)[0])} under"]),
    Visit("breakdown-eager-decode", "Breakdown", f"&run={EAGER_DECODE}", "Download breakdown JSON",
          [FIRST, "decode: host-bound", "Where a step's time goes", "idle: host work", "roofline on NVIDIA H200",
           "ran faster than its floor"]),
    Visit("breakdown-graph-prefill", "Breakdown", f"&run={GRAPH_PREFILL}", "Download breakdown JSON",
          [FIRST, "prefill: GPU-bound", "prefill has 1 step: no per-step chart"]),
    Visit("breakdown-layers", "Breakdown", f"&run={OWN_EAGER}", "Download breakdown JSON",
          [FIRST, "time per decoder layer and bucket", "3 attention+moe", "38 gdn+moe", "39 attention+moe"], {"Phase": "prefill"}),
    Visit("breakdown-cpu", "Breakdown", f"&run={CPU_RUN}", "Download breakdown JSON",
          [FIRST, "CPU ops", "CPU op time by bucket"]),
    Visit("timeline", "Timeline", f"&run={EAGER_DECODE}&step=1", "Largest idle gaps",
          ["decode: host-bound", "GPU idle", "µs since step start"]),
    Visit("compare", "Compare", "", "Download markdown",
          ["Comparing eager (A) with graph (B) on NVIDIA H200", f"{FIRST}, A: eager", f"{FIRST}, B: graph",
           "A: eager", "B: graph", EAGER_PREFILL, GRAPH_PREFILL]),
    Visit("compare-decode", "Compare", f"&a={EAGER_DECODE}&b={GRAPH_DECODE}", "Download markdown",
          ["Comparing eager (A) with graph (B) on NVIDIA H200", "Delta by bucket"], {"Phase": "decode"}),
    Visit("sweep", "Sweep", "", "Lines: median over reps", ["TTFT ms vs prompt tokens", "eager", "graph"]),
    Visit("pd", "PD", f"&pd={PD_RUN}", "Open in Breakdown",
          ["PD run of qwen3.5-35b-a3b, NixlConnector: 4096 prompt + 32 output tokens", "NIXL transfer",
           "Profiled request #5", "prefill server", "decode server", "Prefill and decode servers"]),
    Visit("ranks", "Ranks", f"&ranks={RANK_SET}", "Load imbalance per step",
          [FIRST, "rank 0 ·", "rank 1 ·", "Who waited for whom", "waiting for it"]),
    Visit("memory", "Memory", "", "CUDA-graph profiling scratch KV cache", ["KV-cache block"]),
]


def choose(page: object, label: str, option: str) -> None:
    """Choose ``option`` in the Streamlit selectbox labelled ``label`` and wait for the rerun to finish."""
    box = page.get_by_role("combobox", name=label, exact=True)  # type: ignore[attr-defined]
    box.scroll_into_view_if_needed()
    box.click()
    page.keyboard.type(option)  # type: ignore[attr-defined]  # filters the options to it
    page.get_by_role("option", name=option, exact=True).click()  # type: ignore[attr-defined]
    page.wait_for_timeout(500)  # type: ignore[attr-defined]
    page.wait_for_function(  # type: ignore[attr-defined]
        "!document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=120_000)
    page.wait_for_function(  # type: ignore[attr-defined]
        "Array.from(document.querySelectorAll('[data-testid=\"stPlotlyChart\"]'))"
        ".every(c => c.querySelector('.js-plotly-plot .main-svg'))", timeout=60_000)
    page.wait_for_timeout(800)  # type: ignore[attr-defined]


def open_visit(page: object, url: str, v: Visit, *, shot: Path) -> str:
    """Draw ``v`` (its selectbox choices made), screenshot it, return its text."""
    text = _visit(page, url, v.page, query=v.query, shot=shot, expect=(v.done, [] if v.state else v.expected))
    if v.state:
        for label, option in v.state.items():
            choose(page, label, option)
        text = _drawn(page, v.page, v.done, v.expected, shot=shot)
    return text


@pytest.fixture(scope="module")
def committed_server() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="phaseprof-committed-") as tmp:
        proc, url = _serve(RUNS, Path(tmp))
        try:
            yield url
        finally:
            _stop(proc)


@pytest.mark.parametrize("v", VISITS, ids=[v.slug for v in VISITS])
def test_page_on_the_committed_runs(browser: object, committed_server: str, v: Visit) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 1600})  # type: ignore[attr-defined]
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)  # type: ignore[attr-defined]
    page.on("pageerror", lambda e: errors.append(str(e)))  # type: ignore[attr-defined]
    try:
        open_visit(page, committed_server, v, shot=ARTIFACTS / f"committed-{v.slug}.png")
        assert not errors, errors[:10]
    finally:
        page.close()
