"""``phaseprof dashboard [RUNS_DIR]``: start the Streamlit dashboard (phaseprof/dashboard/app.py) on 127.0.0.1."""

from __future__ import annotations

import importlib.util
import signal
import subprocess
import sys
from pathlib import Path

import typer

from phaseprof.errors import EnvironmentProblem, PhaseprofError

DEFAULT_PORT = 8501
DEFAULT_MAX_UPLOAD_MB = 512
#: Always local: the dashboard reads the user's files, so it is never bound to a public interface.
ADDRESS = "127.0.0.1"


def app_path() -> Path:
    """The Streamlit script, inside the installed package (``phaseprof/dashboard/app.py``)."""
    return Path(__file__).resolve().parent.parent / "dashboard" / "app.py"


def streamlit_command(*, app: Path, runs_dir: Path, port: int, max_upload_mb: int, headless: bool = True,
                      python: str = sys.executable) -> list[str]:
    """The ``streamlit run`` command line. Settings reach the app after ``--`` (see phaseprof/dashboard/widgets.py);
    the upload cap is also Streamlit's own ``server.maxUploadSize``, which rejects bigger uploads."""
    return [
        python, "-m", "streamlit", "run", str(app),
        "--server.address", ADDRESS, "--server.port", str(port),
        "--server.maxUploadSize", str(max_upload_mb), "--server.headless", "true" if headless else "false",
        "--browser.gatherUsageStats", "false", "--client.showErrorDetails", "none",
        "--client.toolbarMode", "minimal", "--server.fileWatcherType", "none", "--global.developmentMode", "false",
        "--", "--runs-dir", str(runs_dir), "--max-upload-mb", str(max_upload_mb),
    ]


def _check_environment(app: Path) -> None:
    missing = [m for m in ("streamlit", "plotly") if importlib.util.find_spec(m) is None]
    if missing:
        raise EnvironmentProblem(f"the dashboard needs {' and '.join(missing)}: pip install 'phaseprof[dashboard]'")
    if not app.is_file():
        raise EnvironmentProblem(f"dashboard app not found at {app}: this phaseprof installation is incomplete "
                                 "(reinstall: pip install 'phaseprof[dashboard]')")


def dashboard(
    runs_dir: Path = typer.Argument(Path("runs"), help="Directory of run directories, traces and breakdowns "
                                    "(the dashboard reads nothing outside it, except uploads)."),
    port: int = typer.Option(DEFAULT_PORT, "--port", min=1, max=65535, help="Port on 127.0.0.1."),
    max_upload_mb: int = typer.Option(DEFAULT_MAX_UPLOAD_MB, "--max-upload-mb", min=1,
                                      help="Largest file the upload box accepts, in MB."),
    open_browser: bool = typer.Option(False, "--open", help="Open a browser tab."),
) -> None:
    """Explore runs in a local web dashboard: breakdowns, step timelines, comparisons, sweeps, memory."""
    runs = runs_dir.expanduser().resolve()
    if not runs.is_dir():
        raise PhaseprofError("runs directory does not exist (capture a run first, or pass a directory of "
                             "traces)", path=runs_dir)
    app = app_path()
    _check_environment(app)
    cmd = streamlit_command(app=app, runs_dir=runs, port=port, max_upload_mb=max_upload_mb, headless=not open_browser)
    typer.echo(f"phaseprof dashboard: http://{ADDRESS}:{port}  (runs: {runs}; Ctrl+C stops it)")
    rc = _run_server(cmd)
    if rc not in (0, -2, -15, 130):
        raise PhaseprofError(f"streamlit exited with status {rc}", exit_code=1)


def _run_server(cmd: list[str]) -> int:
    """Run streamlit as a child and stop it with us: SIGTERM is passed on, Ctrl+C (which the child gets too,
    being in the same process group) is waited out; the child never outlives this process."""
    proc = subprocess.Popen(cmd)
    previous = signal.signal(signal.SIGTERM, lambda *_: proc.terminate())
    try:
        return proc.wait()
    except KeyboardInterrupt:
        try:
            return proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.terminate()
            return proc.wait()
    finally:
        signal.signal(signal.SIGTERM, previous)
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def register(app: typer.Typer) -> None:
    app.command("dashboard")(dashboard)
