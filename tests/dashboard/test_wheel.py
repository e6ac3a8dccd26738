"""The dashboard ships in the wheel: build it, install it into a fresh venv outside the checkout, start the
installed ``phaseprof dashboard`` on the committed runs (traces/) and walk every page in headless Chromium.

The wheel and the venv: ``tests/wheel_env.py`` (the venv's dependencies are exactly the closure of the wheel's
own ``Requires-Dist`` with the ``dashboard`` extra: a dependency the wheel does not declare is missing there, and
the page that needs it fails).
"""

from __future__ import annotations

import os
import subprocess
import time
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from phaseprof.dashboard.sources import scan
from tests.conftest import REPO
from tests.wheel_env import fresh_venv

from .test_browser import _free_port, _stop, browser  # noqa: F401 - the Chromium fixture

pytestmark = pytest.mark.browser

H200 = "h200/{}/20261130T0947{}-h200-qwen3.5-35b-a3b-decode-128in-32out"
EAGER, GRAPH = H200.format("eager", "47Z"), H200.format("graph", "43Z")
#: Per page: query, the text of its last element (so the whole page has been drawn), text it must show.
PAGES = {
    "Runs": ("", "Use as B in Compare", ["Open in Breakdown", "not analysed yet"]),  # + the count, below
    "Breakdown": (f"&run={EAGER}", "Download breakdown JSON", ["NVIDIA H200", "Where a step's time goes",
                                                               "qwen3.5-35b-a3b"]),
    "Timeline": (f"&run={EAGER}", "Largest idle gaps", ["Export step", "µs since step start"]),
    "Compare": (f"&a={EAGER}&b={GRAPH}", "Download markdown", ["model: qwen3.5-35b-a3b", "Delta by bucket"]),
    "Sweep": ("", "Lines: median over reps", ["TTFT ms vs prompt tokens"]),
    "PD": ("&pd=h200/pd/qwen3.5-35b-a3b-fp8-eager-4096in-32out", "Open in Breakdown",
           ["PD run of qwen3.5-35b-a3b", "Prefill and decode servers"]),
    "Ranks": ("", "of world size", ["2 of world size 2 ranks", "per step and rank"]),  # the H200 TP2 capture
    "Memory": ("", "Memory", ["KV cache"]),
}


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory, built_wheel: tuple[Path, float]) -> Iterator[Path]:
    """A fresh venv (outside the checkout) with the built wheel installed; yields its ``bin`` directory."""
    wheel = built_wheel[0]
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    assert {"phaseprof/dashboard/app.py", "phaseprof/dashboard/views/timeline.py"} <= names
    yield fresh_venv(wheel, tmp_path_factory.mktemp("wheel"), {"dashboard"})


def _clean_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "PHASEPROF_"))}
    return {**env, "PHASEPROF_UPLOAD_DIR": str(tmp / "uploads"), "HOME": str(tmp)}


def test_the_installed_package_is_not_the_checkout(installed: Path, tmp_path: Path) -> None:
    out = subprocess.run([str(installed / "python"), "-c", "import phaseprof.commands.dashboard as c, streamlit; "
                          "print(c.__file__); print(c.app_path())"], cwd=tmp_path, env=_clean_env(tmp_path),
                         capture_output=True, text=True, check=True).stdout.split()
    assert all(Path(p).is_relative_to(installed.parent) for p in out), out
    assert Path(out[1]).name == "app.py" and Path(out[1]).is_file()


def test_the_installed_dashboard_serves_every_page_of_the_committed_runs(installed: Path, tmp_path: Path,
                                                                         browser: object) -> None:  # noqa: F811
    port = _free_port()
    log = (tmp_path / "dashboard.log").open("w")
    proc = subprocess.Popen([str(installed / "phaseprof"), "dashboard", str(REPO / "traces"), "--port", str(port)],
                            cwd=tmp_path, env=_clean_env(tmp_path), stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            assert proc.poll() is None, (tmp_path / "dashboard.log").read_text()
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2):
                    break
            except OSError:
                assert time.monotonic() < deadline, "the installed dashboard did not start within 90 s"
                time.sleep(0.5)
        n = len(scan(REPO / "traces")[0])  # every run directory, loose trace and breakdown, listed
        page = browser.new_page(viewport={"width": 1400, "height": 2000})  # type: ignore[attr-defined]
        for name, (query, last, expected) in PAGES.items():
            expected = [*expected, f"{n} of {n} under"] if name == "Runs" else expected
            page.goto(f"{url}/?page={name}{query}")
            page.get_by_text(last, exact=False).first.wait_for(timeout=180_000)
            page.wait_for_function("!document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=180_000)
            page.wait_for_timeout(500)
            text = page.locator('[data-testid="stMain"]').inner_text()
            text += page.evaluate("Array.from(document.querySelectorAll('.js-plotly-plot'))"
                                  ".map(e => e.textContent).join(' ')")
            for t in expected:
                assert t in text, f"{name}: {t!r} not on the page"
            assert "Traceback" not in text and "internal error" not in text, name
            assert page.locator('[data-testid="stException"]').count() == 0, name
            assert page.locator('[data-testid="stAlertContentError"]').count() == 0, (name, text[:2000])
        page.close()
    finally:
        _stop(proc)
    assert "Error" not in (tmp_path / "dashboard.log").read_text()
