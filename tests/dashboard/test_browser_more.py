"""In headless Chromium: a markdown-image GPU name makes the browser fetch nothing, and the
Timeline's one-click export downloads a trace file that is the step."""

from __future__ import annotations

import gzip
import http.server
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from phaseprof.analysis.pipeline import analyze_trace
from tests.conftest import PUBLIC_CUT_DIR

from .conftest import B200_PREFILL, H100_DECODE
from .test_browser import _serve, _stop, browser  # noqa: F401 - the Chromium fixture
from .test_hostile import with_gpu_name

pytestmark = pytest.mark.browser


class _Tracker(http.server.BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        type(self).hits.append(self.path)
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def tracker() -> Iterator[tuple[int, list[str]]]:
    """A web server on 127.0.0.1 that records every request made to it."""
    _Tracker.hits = []
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Tracker)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv.server_address[1], _Tracker.hits
    srv.shutdown()
    srv.server_close()


def _wait_drawn(page: object, last_text: str) -> str:
    page.get_by_text(last_text, exact=False).first.wait_for(timeout=120_000)  # type: ignore[attr-defined]
    page.wait_for_function(  # type: ignore[attr-defined]
        "!document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=120_000)
    page.wait_for_timeout(1000)  # type: ignore[attr-defined]  # images, if any, would load now
    return page.locator('[data-testid="stMain"]').inner_text()  # type: ignore[attr-defined]


def test_a_markdown_image_gpu_name_is_shown_as_text_and_never_fetched(browser, tracker, tmp_path):  # noqa: F811
    port, hits = tracker
    evil = f"![x](http://127.0.0.1:{port}/track.png)"
    runs = tmp_path / "runs"
    runs.mkdir()
    with_gpu_name(PUBLIC_CUT_DIR / H100_DECODE, runs / "evil.json.gz", evil)
    shutil.copy(PUBLIC_CUT_DIR / B200_PREFILL, runs / B200_PREFILL)
    proc, url = _serve(runs, tmp_path)
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 1600})
        seen = []
        page.on("request", lambda r: seen.append(r.url))
        for query, last in (("page=Breakdown&run=evil.json.gz", "Download breakdown JSON"),
                            ("page=Timeline&run=evil.json.gz", "Largest idle gaps"),
                            (f"page=Compare&a=evil.json.gz&b={B200_PREFILL}", "Download markdown")):
            page.goto(f"{url}/?{query}")
            text = _wait_drawn(page, last)
            # The name is on the page, literally (the escaper's invisible word joiners, which stop autolinks, aside).
            assert evil in text.replace("\u2060", ""), query
        page.close()
    finally:
        _stop(proc)
    assert hits == [] and not [u for u in seen if f":{port}/" in u]
    assert any(u.startswith(url) for u in seen)  # (the page itself did load through the browser)


def test_the_timeline_export_downloads_the_step_in_one_click(browser, runs_dir, tmp_path):  # noqa: F811
    proc, url = _serve(runs_dir, tmp_path)
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 1600})
        page.goto(f"{url}/?page=Timeline&run={H100_DECODE}&step=1")
        _wait_drawn(page, "Largest idle gaps")
        with page.expect_download(timeout=120_000) as info:
            page.get_by_role("button", name="Export step 1 as a trace file").click()
        dl = info.value
        out = tmp_path / dl.suggested_filename
        dl.save_as(out)
        page.close()
    finally:
        _stop(proc)
    assert out.name == "h100_vllm_llama70b_tp4_decode_2steps-step1.pt.trace.json.gz"
    assert gzip.decompress(out.read_bytes())[:1] == b"{"
    src = analyze_trace(runs_dir / H100_DECODE).steps[1]
    (got,) = analyze_trace(out).steps
    assert (got.phase, got.kernels, got.launches.total) == (src.phase, src.kernels, src.launches.total)
    assert got.gpu_busy_us == pytest.approx(src.gpu_busy_us, abs=1e-3)
    assert Path(out).stat().st_size < (runs_dir / H100_DECODE).stat().st_size
