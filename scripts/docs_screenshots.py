"""Screenshots of the dashboard on the real H200 captures (traces/h200) for docs/img/.

Starts ``phaseprof dashboard traces/h200`` and drives headless Chromium exactly as the end-to-end test does
(tests/dashboard/test_browser.py: ``_serve`` / ``_stop`` / ``_visit``, the same flags and waits), then crops each
page to the main area of a 1400x1000 viewport:

- docs/img/breakdown.png: Breakdown of the eager prefill-4096 run (phase table and GPU busy by bucket);
- docs/img/compare.png: Compare, eager (A) vs CUDA-graph (B) decode 128+32, decode phase;
- docs/img/sweep.png: TTFT vs prompt tokens, the eager and graph prefill sweeps overlaid;
- docs/img/timeline.png: Timeline of one eager decode step (step 1);
- docs/img/timeline-zoom.png: the same step zoomed to 4 ms of it (``&zoom=13000:17000``).

Usage: ``python scripts/docs_screenshots.py [--out docs/img] [--keep-full DIR]``. Needs the ``dashboard`` extra,
playwright (python) and Chromium (``/usr/bin/chromium`` or ``PHASEPROF_CHROMIUM``).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.dashboard import test_browser as e2e  # noqa: E402  (the e2e test's server and page helpers)

RUNS = REPO / "traces" / "h200"
VIEWPORT = {"width": 1400, "height": 1000}
MAX_BYTES = 300_000
ZOOM_US = "13000:17000"  # µs since the step's start: 4 ms of the ~128 ms eager decode step


def _run_key(mode: str, suffix: str) -> str:
    (d,) = sorted((RUNS / mode).glob(f"*-h200-qwen3.5-35b-a3b-{suffix}"))
    return d.relative_to(RUNS).as_posix()


EAGER_PREFILL = _run_key("eager", "prefill-4096")
EAGER_DECODE = _run_key("eager", "decode-128in-32out")
GRAPH_DECODE = _run_key("graph", "decode-128in-32out")

#: What each page must show for these captures (the e2e test's table is for its own fixtures).
PAGES = {
    **e2e.PAGES,
    "Breakdown": ("Download breakdown JSON", ["Where a step's time goes", "Per step", "Top kernels per bucket",
                                              "qwen3.5-35b-a3b"]),
    "Compare": ("Download markdown", ["Comparing NVIDIA H200 (A) with NVIDIA H200 (B)", "Delta by bucket",
                                      "mode differs"]),
    "Sweep": ("Lines: median over reps", ["TTFT ms vs prompt tokens", "eager/", "graph/"]),
    "Timeline": ("Largest idle gaps", ["GPU idle", "µs since step start", "phaseprof_step#1_"]),
}


def _collapse_sidebar(page) -> None:
    """Collapse the sidebar as a user would (its button), so the main area takes the whole viewport width."""
    if page.locator('[data-testid="stSidebar"][data-collapsed="false"]').count():
        page.locator('[data-testid="stSidebar"]').hover()
        page.get_by_role("button", name="Collapse sidebar").click()
        page.locator('[data-testid="stSidebar"][data-collapsed="true"]').wait_for(timeout=10_000)
        page.wait_for_timeout(1500)  # the slide-out animation and plotly's resize


def _crop(page, out: Path, *, anchor: str = "h1", margin: int = 12) -> None:
    """Screenshot the main area (sidebar collapsed, Streamlit's top bar hidden), scrolled so that the first
    ``anchor`` (a CSS selector inside the main area, or ``text=...``) sits ``margin`` px below the top."""
    _collapse_sidebar(page)
    page.add_style_tag(content='[data-testid="stHeader"] { display: none !important; }')
    target = page.locator('[data-testid="stMain"]').locator(anchor).first
    target.wait_for(timeout=30_000)
    page.evaluate("""([el, margin]) => {
        const main = document.querySelector('[data-testid="stMain"]');
        main.scrollTop += el.getBoundingClientRect().top - main.getBoundingClientRect().top - margin;
    }""", [target.element_handle(), margin])
    page.mouse.move(VIEWPORT["width"] - 1, VIEWPORT["height"] - 1)  # no hover: no plotly mode bar, no tooltip
    page.wait_for_timeout(800)
    box = page.locator('[data-testid="stMain"]').bounding_box()
    x = max(int(box["x"]), 0)
    clip = {"x": x, "y": 0, "width": min(int(box["width"]), VIEWPORT["width"] - x), "height": VIEWPORT["height"]}
    page.screenshot(path=str(out), clip=clip)


def _select(page, label: str, option: str) -> None:
    """Choose ``option`` in the Streamlit selectbox labelled ``label`` and wait for the rerun to finish."""
    page.get_by_role("combobox", name=label, exact=True).click()
    page.get_by_role("option", name=option, exact=True).click()
    page.wait_for_timeout(500)
    page.wait_for_function("!document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=120_000)
    page.wait_for_function(
        "Array.from(document.querySelectorAll('[data-testid=\"stPlotlyChart\"]'))"
        ".every(c => c.querySelector('.js-plotly-plot .main-svg'))", timeout=60_000)
    page.wait_for_timeout(800)


def _visit(page, url: str, name: str, *, query: str = "", shot: Path, attempts: int = 3) -> str:
    """The e2e test's ``_visit``; retried, since a chart's SVG title can lag the page's last element."""
    for i in range(attempts):
        try:
            return e2e._visit(page, url, name, query=query, shot=shot)
        except AssertionError:
            if i == attempts - 1:
                raise
            page.wait_for_timeout(3000)
    raise AssertionError("unreachable")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "img")
    ap.add_argument("--keep-full", type=Path, default=None, help="also keep the full-viewport shots here")
    args = ap.parse_args(argv)
    from playwright.sync_api import sync_playwright

    e2e.PAGES.clear()
    e2e.PAGES.update(PAGES)
    tmp = Path(tempfile.mkdtemp(prefix="phaseprof-docs-shots-"))
    full = args.keep_full or tmp / "full"
    full.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    proc, url = e2e._serve(RUNS, tmp)
    print(f"dashboard pid {proc.pid} at {url}", flush=True)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(e2e.CHROMIUM), args=e2e.FLAGS, headless=True)
            try:
                page = browser.new_page(viewport=VIEWPORT)
                _visit(page, url, "Breakdown", query=f"&run={EAGER_PREFILL}", shot=full / "breakdown.png")
                _crop(page, args.out / "breakdown.png")
                page.close()

                page = browser.new_page(viewport=VIEWPORT)
                q = f"&a={EAGER_DECODE}&b={GRAPH_DECODE}"
                _visit(page, url, "Compare", query=q, shot=full / "compare-first.png")
                _select(page, "Phase", "decode")
                page.screenshot(path=str(full / "compare.png"))
                _crop(page, args.out / "compare.png", anchor="text=Comparing NVIDIA H200")
                page.close()

                page = browser.new_page(viewport=VIEWPORT)
                _visit(page, url, "Sweep", shot=full / "sweep.png")
                _crop(page, args.out / "sweep.png")
                page.close()

                page = browser.new_page(viewport=VIEWPORT)
                _visit(page, url, "Timeline", query=f"&run={EAGER_DECODE}&step=1", shot=full / "timeline.png")
                _crop(page, args.out / "timeline.png")
                page.close()

                page = browser.new_page(viewport=VIEWPORT)
                _visit(page, url, "Timeline", query=f"&run={EAGER_DECODE}&step=1&zoom={ZOOM_US}",
                       shot=full / "timeline-zoom.png")
                _crop(page, args.out / "timeline-zoom.png")
                page.close()
            finally:
                browser.close()
    finally:
        e2e._stop(proc)
        if args.keep_full is None:
            shutil.rmtree(tmp, ignore_errors=True)
    too_big = []
    for name in ("breakdown", "compare", "sweep", "timeline", "timeline-zoom"):
        f = args.out / f"{name}.png"
        print(f"{f.relative_to(REPO) if f.is_relative_to(REPO) else f}: {f.stat().st_size:,} bytes")
        if f.stat().st_size >= MAX_BYTES:
            too_big.append(f.name)
    if too_big:
        print(f"over {MAX_BYTES:,} bytes: {', '.join(too_big)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
