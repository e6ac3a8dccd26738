"""End to end on hostile runs: headless Chromium opens every page of ``phaseprof dashboard`` on a
runs directory whose every breakdown, trace and run-record string is hostile (``hostile_runs``), hovers every
chart, and checks what the browser did: no request left for anything but the dashboard's own address, no element
the payload made (a bold or italic run, a styled span, a link, an image, LaTeX, a coloured directive; in the page
or in plotly's SVG), no link the payload made, no dialog.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, urlsplit

import pytest

from . import hostile_runs as H
from .test_browser import ARTIFACTS, _serve, _stop, browser  # noqa: F401 - browser is a fixture

pytestmark = pytest.mark.browser

#: Page -> its query (the hostile run it opens) and the text of its last element (the page is drawn).
PAGES = {
    "Runs": ("", "Use as B in Compare"),
    "Breakdown": (f"&run={quote(H.RUN_A)}", "Download breakdown JSON"),
    "Timeline": (f"&run={quote(H.TRACE)}", "Largest idle gaps"),
    "Compare": (f"&a={quote(H.RUN_A)}&b={quote(H.RUN_B)}", "Download markdown"),
    "Sweep": ("", "Lines: median over reps"),
    "PD": (f"&pd={quote(H.PD_RUN)}", "Open in Breakdown"),
    "Memory": ("", "Memory"),
    "Ranks": ("", "Ranks"),
}
#: Every element whose text starts with a payload word, every attribute naming the payload's hosts or words,
#: and every link that leads off the page, in the document and in plotly's SVG.
_MADE_BY_PAYLOAD = """(markers) => {
  const bad = [];
  const hostile = /127\\.0\\.0\\.1:9\\b|payweb|paymail|PAY[A-Z]+|alert\\(/;
  for (const el of document.querySelectorAll('*')) {
    if (el.tagName === 'SCRIPT' || el.tagName === 'STYLE') continue;
    const text = (el.textContent || '').trim();
    // (A code block's highlighter splits the text it shows into token spans: text shown as written.)
    if (markers.some(m => text.startsWith(m)) && !el.closest('pre, code'))
      bad.push(`element made by the payload: ${el.outerHTML.slice(0, 120)} in ${el.parentElement.outerHTML.slice(0, 300)}`);
    for (const attr of el.attributes) {
      if (['data-testid', 'aria-label', 'title', 'value', 'data-unformatted', 'aria-valuetext', 'id'].includes(attr.name)
          || (attr.name === 'href' && attr.value.startsWith('#'))) continue;  // text shown as text, anchors' ids
      if (hostile.test(attr.value) || attr.name.startsWith('on'))
        bad.push(`<${el.tagName} ${attr.name}="${attr.value.slice(0, 80)}">`);
    }
  }
  for (const a of document.querySelectorAll('a')) {
    const href = a.getAttribute('href') || a.getAttribute('xlink:href') || '';
    if (href && !href.startsWith('#') && !href.startsWith(location.origin + '/'))
      bad.push(`link to ${href.slice(0, 80)}: ${(a.textContent || '').slice(0, 40)}`);
  }
  return bad;
}"""


@pytest.fixture(scope="module")
def hostile_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("hostile-browser")
    (tmp / "runs").mkdir()
    proc, url = _serve(H.build(tmp / "runs"), tmp)
    yield url
    _stop(proc)


def _drawn(page: object, done: str) -> None:
    page.get_by_text(done, exact=False).first.wait_for(timeout=400_000)  # type: ignore[attr-defined]
    page.wait_for_function(  # type: ignore[attr-defined]  # the script run has finished
        "!document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=400_000)
    page.wait_for_function(  # type: ignore[attr-defined]  # every chart drawn by plotly.js
        "Array.from(document.querySelectorAll('[data-testid=\"stPlotlyChart\"]'))"
        ".every(c => c.querySelector('.js-plotly-plot .main-svg'))", timeout=60_000)
    page.wait_for_timeout(1000)  # type: ignore[attr-defined]  # images and cursors a style asked for: fetched


def _hover_every_chart(page: object) -> int:
    """Hover the middle of every chart's plot area (hover labels are drawn only then)."""
    areas = page.locator(".js-plotly-plot .nsewdrag")  # type: ignore[attr-defined]
    for i in range(areas.count()):
        areas.nth(i).scroll_into_view_if_needed()
        box = areas.nth(i).bounding_box()
        if box:  # the mouse itself, not Locator.hover: a chart's overlays may sit above its drag area
            page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)  # type: ignore[attr-defined]
            page.wait_for_timeout(300)  # type: ignore[attr-defined]
    return areas.count()


def test_every_page_on_hostile_runs_in_headless_chromium(browser: object, hostile_server: str) -> None:
    origin = hostile_server
    context = browser.new_context(viewport={"width": 1400, "height": 2400})  # type: ignore[attr-defined]
    left: list[str] = []

    def route(r: object) -> None:
        url = r.request.url  # type: ignore[attr-defined]
        if url.startswith(origin + "/") or urlsplit(url).scheme in ("data", "blob"):
            r.continue_()  # type: ignore[attr-defined]
        else:
            left.append(url)
            r.abort()  # type: ignore[attr-defined]

    context.route("**/*", route)
    page = context.new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    charts = 0
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for name, (query, done) in PAGES.items():
        page.goto(f"{origin}/?page={name}{query}")
        _drawn(page, done)
        text = page.locator('[data-testid="stMain"]').inner_text()
        assert "internal error" not in text and "Traceback" not in text, (name, text[:500])
        assert "PAYBOLD" in text or name in ("Memory", "Ranks", "Runs"), f"{name}: the hostile run is not shown"
        charts += _hover_every_chart(page)
        bad = page.evaluate(_MADE_BY_PAYLOAD, list(H.MARKERS))
        (ARTIFACTS / f"hostile-{name.lower()}.txt").write_text("\n".join(bad))
        assert not bad, (name, bad[:10])
        page.screenshot(path=str(ARTIFACTS / f"hostile-{name.lower()}.png"), full_page=True)
    # Breakdown (3: RUN_A is one prefill step, so no per-step chart; test_live_markup walks that chart on RUN_B),
    # Timeline, Compare, Sweep: the walk met the figures
    assert charts >= 5
    assert not left, f"requests left the dashboard's address: {left[:10]}"
    assert not dialogs, dialogs
    assert not errors, errors[:10]
    context.close()
