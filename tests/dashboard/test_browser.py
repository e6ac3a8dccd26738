"""End to end: ``phaseprof dashboard`` serves on localhost and headless Chromium walks every page.

Screenshots go to test-artifacts/dashboard/ (git-ignored). docs/img/ is written by scripts/docs_screenshots.py
from the visits of test_browser_committed.py (the committed runs).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import PUBLIC_DIR, REPO

from .conftest import B200_PREFILL, H100_DECODE, PUBLIC_B200, PUBLIC_H100

pytestmark = pytest.mark.browser

CHROMIUM = Path(os.environ.get("PHASEPROF_CHROMIUM", "/usr/bin/chromium"))
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]
ARTIFACTS = REPO / "test-artifacts" / "dashboard"
DOCS_IMG = REPO / "docs" / "img"
#: Per page: the text of its last element (so the whole page has been drawn), and other text it must show.
PAGES = {
    "Runs": ("Use as B in Compare", ["Open in Breakdown", "Add a trace or breakdown"]),
    "Breakdown": ("Download breakdown JSON", ["Where a step's time goes", "Per step", "Top kernels per bucket",
                                              "Unknown kernels"]),
    "Timeline": ("Largest idle gaps", ["GPU idle", "µs since step start"]),
    "Compare": ("Download markdown", ["NVIDIA H100 80GB HBM3 (A) with", "NVIDIA B200 (B)", "Delta by bucket",
                                      "Markdown for a PR"]),
    "Sweep": ("Lines: median over reps", ["TTFT ms vs prompt tokens"]),
    "PD": ("PD", ["No disaggregated (PD) run"]),
    "Memory": ("Memory", []),
    "Ranks": ("Ranks", ["No directory with several rank traces"]),
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright (python) is not installed: pip install playwright")
    if not CHROMIUM.exists():
        pytest.skip(f"no Chromium at {CHROMIUM}: apt-get install -y chromium (or set PHASEPROF_CHROMIUM)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS, headless=True)
        yield b
        b.close()


def _serve(runs: Path, tmp: Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    env = {**os.environ, "PHASEPROF_UPLOAD_DIR": str(tmp / "uploads")}
    log = (tmp / "dashboard.log").open("w")  # a file, not a pipe: an unread pipe could block the server
    proc = subprocess.Popen([sys.executable, "-m", "phaseprof.commands.main", "dashboard", str(runs), "--port", str(port)],
                            cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"dashboard exited early: {(tmp / 'dashboard.log').read_text()}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.5)
    _stop(proc)
    raise AssertionError("dashboard did not start within 60 s")


def _stop(proc: subprocess.Popen) -> None:
    """Stop ``phaseprof dashboard``; it stops its streamlit child (checked: nothing is left listening)."""
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextmanager
def page_on(runs: Path, tmp: Path, *, height: int) -> Iterator[tuple[Any, str, list[str]]]:
    """A headless Chromium page (1300 x ``height``) and a dashboard serving ``runs``: (page, the dashboard's URL,
    the console and page errors seen so far). Skips without playwright or Chromium; stops the dashboard."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright (python) is not installed: pip install playwright")
    if not CHROMIUM.exists():
        pytest.skip(f"no Chromium at {CHROMIUM}")
    proc, url = _serve(runs, tmp)
    try:
        with sync_playwright() as pw:
            b = pw.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS, headless=True)
            page = b.new_page(viewport={"width": 1300, "height": height})
            errors: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            yield page, url, errors
            b.close()
    finally:
        _stop(proc)


@pytest.fixture()
def server(runs_dir: Path, tmp_path: Path) -> Iterator[str]:
    proc, url = _serve(runs_dir, tmp_path)
    yield url
    _stop(proc)
    with pytest.raises(OSError):  # the server is gone with the CLI
        urllib.request.urlopen(f"{url}/_stcore/health", timeout=2)


def _visit(page: object, url: str, name: str, *, query: str = "", shot: Path | None = None,
           expect: tuple[str, list[str]] | None = None) -> str:
    """Open page ``name`` and wait until it is drawn (``expect``: the text of its last element and other text it
    must show; ``PAGES[name]`` by default); screenshot it; return its text (charts' SVG text included)."""
    done, expected = expect or PAGES[name]
    page.goto(f"{url}/?page={name}{query}")  # type: ignore[attr-defined]
    return _drawn(page, name, done, expected, shot=shot)


def _drawn(page: object, name: str, done: str, expected: list[str], *, shot: Path | None = None) -> str:
    """Wait until the page shows ``done`` with its script run finished and every chart drawn; check it shows
    ``expected`` and no error; screenshot it; return its text."""
    page.get_by_text(done, exact=False).first.wait_for(timeout=120_000)  # type: ignore[attr-defined]
    page.wait_for_function(  # type: ignore[attr-defined]  # the script run has finished
        "!document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=120_000)
    page.wait_for_function(  # type: ignore[attr-defined]  # every chart drawn by plotly.js
        "Array.from(document.querySelectorAll('[data-testid=\"stPlotlyChart\"]'))"
        ".every(c => c.querySelector('.js-plotly-plot .main-svg'))", timeout=60_000)
    page.wait_for_timeout(500)  # type: ignore[attr-defined]
    for _ in range(30):  # a chart's SVG text can lag its element by a few seconds
        text = page.locator('[data-testid="stMain"]').inner_text()  # type: ignore[attr-defined]
        # Chart titles and labels are SVG text, not in inner_text.
        text += page.evaluate("Array.from(document.querySelectorAll('.js-plotly-plot'))"  # type: ignore[attr-defined]
                              ".map(e => e.textContent).join(' ')")
        if all(t in text for t in expected):
            break
        page.wait_for_timeout(1000)  # type: ignore[attr-defined]
    for t in expected:
        assert t in text, f"{name}: {t!r} not on the page"
    assert "Traceback" not in text and "internal error" not in text
    assert page.locator('[data-testid="stException"]').count() == 0  # type: ignore[attr-defined]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shot or ARTIFACTS / f"{name.lower()}.png"))  # type: ignore[attr-defined]
    return text


def test_every_page_in_headless_chromium(browser: object, server: str, runs_dir: Path) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 2000})  # type: ignore[attr-defined]
    errors: list[str] = []  # the browser console's errors ("Invalid color specifier" on Compare)
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)  # type: ignore[attr-defined]
    text = _visit(page, server, "Runs")
    n = len(list(runs_dir.glob("*.json.gz"))) + 1  # loose traces and the run directory (the table is a canvas)
    assert f"{n} of {n} under" in text
    assert page.locator('[data-testid="stDataFrame"]').count() == 1
    # Navigation by clicking the sidebar, as a user does.
    page.get_by_text("Breakdown", exact=True).first.click()
    page.get_by_text(PAGES["Breakdown"][0]).first.wait_for(timeout=120_000)
    _visit(page, server, "Breakdown")
    _visit(page, server, "Timeline")
    text = _visit(page, server, "Compare", query=f"&a={H100_DECODE}&b={B200_PREFILL}")
    assert H100_DECODE in text and B200_PREFILL in text
    _visit(page, server, "Sweep")
    _visit(page, server, "PD")
    _visit(page, server, "Memory")
    _visit(page, server, "Ranks")
    assert not errors, errors[:10]
    page.close()


@pytest.mark.public
def test_public_h100_vs_b200_in_chromium(browser: object, runs_dir: Path, tmp_path: Path) -> None:
    if not PUBLIC_DIR.is_dir():
        pytest.skip(f"public traces not present at {PUBLIC_DIR}")
    proc, url = _serve(PUBLIC_DIR, tmp_path)
    try:
        page = browser.new_page(viewport={"width": 1280, "height": 2300})  # type: ignore[attr-defined]
        query = f"&a={PUBLIC_H100}&b={PUBLIC_B200}"
        _visit(page, url, "Compare", query=query)  # analyses both (progress boxes), then cached:
        text = _visit(page, url, "Compare", query=query, shot=ARTIFACTS / "compare-public-h100-b200.png")
        assert "LlamaForCausalLM" in text and "gpt-oss-120b" in text and "different workloads" in text
        _visit(page, url, "Breakdown", query=f"&run={PUBLIC_H100}", shot=ARTIFACTS / "breakdown-public.png")
        page.close()
    finally:
        _stop(proc)
