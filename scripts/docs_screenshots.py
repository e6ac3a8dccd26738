"""Screenshots of every dashboard page on the committed runs (traces/) for docs/img/.

Starts ``phaseprof dashboard traces`` and drives headless Chromium through the visits of the end-to-end test on
the committed runs (tests/dashboard/test_browser_committed.py: ``VISITS``, ``open_visit``; the same server,
flags and waits), then crops each page to the main area of a 1400x1000 viewport (sidebar collapsed), scrolled to
the part worth showing, and stores it as a small palette PNG:

- runs.png: the Runs table of every trace, run and breakdown under traces/;
- breakdown.png: the H200 eager decode (verdicts, where a step's time goes: busy by bucket, idle by cause);
- breakdown-graph-prefill.png: the H200 CUDA-graph prefill of 4,096 tokens (GPU-bound);
- breakdown-layers.png: vLLM's own eager trace, the per-layer heat map (every layer labelled);
- roofline.png: the eager decode's speed of light (points by bucket, the MoE faster than its floor ringed);
- breakdown-cpu.png: the CPU run (CPU ops by bucket);
- timeline.png / timeline-zoom.png: step 1 of the eager decode, whole and zoomed to 13-17 ms;
- compare.png: eager (A) vs CUDA-graph (B) decode 128+32, decode phase;
- sweep.png: TTFT vs prompt tokens, the eager, graph and server sweeps overlaid;
- pd.png: the H200 disaggregated 4,096-token run (handoff summary, the profiled request's TTFT, both servers);
- ranks.png: the H200 TP2 rank folder (verdicts per rank, who waited for whom);
- memory.png: the memory plan of the default preset.

Usage: ``python scripts/docs_screenshots.py [--out docs/img] [--keep-full DIR]``. Needs the ``dashboard`` extra,
playwright (python), Chromium (``/usr/bin/chromium`` or ``PHASEPROF_CHROMIUM``) and Pillow (palette PNGs).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.dashboard import test_browser as e2e  # noqa: E402  (the e2e test's server helpers)
from tests.dashboard import test_browser_committed as pages  # noqa: E402  (its visits of the committed runs)

VIEWPORT = {"width": 1400, "height": 1000}
MAX_BYTES = 250_000
ZOOM_US = "13000:17000"  # µs since the step's start: 4 ms of the ~125 ms eager decode step
VISITS = {v.slug: v for v in pages.VISITS}
VISITS["timeline-zoom"] = replace(VISITS["timeline"], slug="timeline-zoom",
                                  query=f"{VISITS['timeline'].query}&zoom={ZOOM_US}")
#: docs/img file -> (visit, what to scroll to the top: a CSS selector in the main area or ``text=...``).
SHOTS = {
    "runs": ("runs", "h1"),
    "breakdown": ("breakdown-eager-decode", "h1"),
    "breakdown-graph-prefill": ("breakdown-graph-prefill", "h1"),
    "breakdown-layers": ("breakdown-layers", "text=Attribution"),
    "roofline": ("breakdown-eager-decode", "text=Speed of light"),
    "breakdown-cpu": ("breakdown-cpu", "h1"),
    "timeline": ("timeline", "h1"),
    "timeline-zoom": ("timeline-zoom", "h1"),
    "compare": ("compare-decode", "text=What to look at first, A"),
    "sweep": ("sweep", "h1"),
    "pd": ("pd", "h1"),
    "ranks": ("ranks", "h1"),
    "memory": ("memory", "h2"),
}


def _collapse_sidebar(page) -> None:
    """Collapse the sidebar as a user would (its button), so the main area takes the whole viewport width."""
    if page.locator('[data-testid="stSidebar"][data-collapsed="false"]').count():
        page.locator('[data-testid="stSidebar"]').hover()
        page.get_by_role("button", name="Collapse sidebar").click()
        page.locator('[data-testid="stSidebar"][data-collapsed="true"]').wait_for(state="attached", timeout=10_000)
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
    page.wait_for_timeout(1500)  # dataframes are canvases drawn after the scroll
    box = page.locator('[data-testid="stMain"]').bounding_box()
    x = max(int(box["x"]), 0)
    clip = {"x": x, "y": 0, "width": min(int(box["width"]), VIEWPORT["width"] - x), "height": VIEWPORT["height"]}
    page.screenshot(path=str(out), clip=clip)
    _small(out)


def _small(path: Path) -> None:
    """The PNG as a 256-colour palette image (a dashboard page has few colours): a fraction of the bytes."""
    from PIL import Image

    with Image.open(path) as im:
        small = im.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    small.save(path, optimize=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "img")
    ap.add_argument("--keep-full", type=Path, default=None, help="also keep the full-viewport shots here")
    ap.add_argument("--only", nargs="*", default=None, help="only these docs/img names (without .png)")
    args = ap.parse_args(argv)
    from playwright.sync_api import sync_playwright

    tmp = Path(tempfile.mkdtemp(prefix="phaseprof-docs-shots-"))
    full = args.keep_full or tmp / "full"
    full.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    names = args.only or list(SHOTS)
    proc, url = e2e._serve(pages.RUNS, tmp)
    print(f"dashboard pid {proc.pid} at {url}", flush=True)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(e2e.CHROMIUM), args=e2e.FLAGS, headless=True)
            try:
                for name in names:
                    visit, anchor = SHOTS[name]
                    print(f"{name}: {visit}", flush=True)
                    page = browser.new_page(viewport=VIEWPORT)
                    pages.open_visit(page, url, VISITS[visit], shot=full / f"{name}.png")
                    _crop(page, args.out / f"{name}.png", anchor=anchor)
                    page.close()
            finally:
                browser.close()
    finally:
        e2e._stop(proc)
        if args.keep_full is None:
            shutil.rmtree(tmp, ignore_errors=True)
    too_big = []
    for name in names:
        f = args.out / f"{name}.png"
        print(f"{f.relative_to(REPO) if f.is_relative_to(REPO) else f}: {f.stat().st_size:,} bytes")
        if f.stat().st_size > MAX_BYTES:
            too_big.append(f.name)
    if too_big:
        print(f"over {MAX_BYTES:,} bytes: {', '.join(too_big)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
