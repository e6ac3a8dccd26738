"""Suite-wide test options, markers and trace locations.

- ``--update-golden``: rewrite the expected JSON of the golden tests (tests/golden/expected/) from the current
  code instead of comparing; review the diff before committing it.
- Markers (also declared in pyproject.toml): ``public`` needs ``../shared/traces/public`` (the wider tier, CI
  has it), ``vllm`` runs the real CPU vLLM engine, ``browser`` drives headless Chromium.
- ``public_dir``: the public trace folder, or a skip saying where it was looked for.
- ``public_trace``: a test taking this argument runs once per public trace file (one skipped item when the
  folder is absent), and is marked ``public``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: The wider tier of real traces; PHASEPROF_PUBLIC_TRACES points elsewhere (e.g. a clone outside the workspace).
PUBLIC_DIR = Path(os.environ.get("PHASEPROF_PUBLIC_TRACES", REPO.parent / "shared" / "traces" / "public")).resolve()
#: Cut-down real traces committed with the repo (traces/public-cut/README.md says how each was cut).
PUBLIC_CUT_DIR = REPO / "traces" / "public-cut"

_MARKERS = {
    "public": "needs ../shared/traces/public (the wider tier; CI has it)",
    "vllm": "runs the real CPU vLLM engine",
    "browser": "drives headless Chromium against the real dashboard server",
}


def public_trace_files() -> list[Path]:
    """Every trace in the public folder (``*.json``, ``*.json.gz``), sorted; empty when the folder is absent."""
    if not PUBLIC_DIR.is_dir():
        return []
    return sorted(p for p in PUBLIC_DIR.iterdir() if p.name.endswith((".json", ".json.gz")))


def _public_missing_reason() -> str:
    return (f"public traces not present at {PUBLIC_DIR} (a fresh clone has no ../shared; "
            "set PHASEPROF_PUBLIC_TRACES to run this tier)")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite tests/golden/expected/*.json from the current code instead of comparing")


def pytest_configure(config: pytest.Config) -> None:
    for name, text in _MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "public_trace" not in metafunc.fixturenames:
        return
    files = public_trace_files()
    if files:
        params = [pytest.param(p, id=p.name.split(".json")[0], marks=pytest.mark.public) for p in files]
    else:
        params = [pytest.param(None, id="no-public-traces",
                               marks=[pytest.mark.public, pytest.mark.skip(reason=_public_missing_reason())])]
    metafunc.parametrize("public_trace", params)


@pytest.fixture(scope="session")
def update_golden(request: pytest.FixtureRequest) -> bool:
    """True when the run was started with ``--update-golden``."""
    return bool(request.config.getoption("--update-golden"))


@pytest.fixture(scope="session")
def public_dir() -> Path:
    """The public trace folder; skips the test with the reason when it is absent."""
    if not PUBLIC_DIR.is_dir():
        pytest.skip(_public_missing_reason())
    return PUBLIC_DIR


@pytest.fixture(scope="session")
def built_wheel(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, float]:
    """The wheel built once per session from a copy of the sources (``tests/wheel_env.py``), and the seconds
    ``pip wheel`` took."""
    from tests.wheel_env import build_wheel

    return build_wheel(tmp_path_factory.mktemp("wheel-build"))
