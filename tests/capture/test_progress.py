"""The capture's progress display: stages with elapsed time on a terminal, nothing at all in a pipe."""

from __future__ import annotations

import io

from rich.console import Console

from phaseprof.capture.inprocess.progress import Stages


def _run(console: Console) -> None:
    with Stages(console) as stages:
        with stages.stage("starting vLLM") as update:
            update(detail="Loading weights took 0.01 seconds")
        with stages.stage("timed requests (no profiler)", total=3) as update:
            for k in range(1, 4):
                update(done=k)


def test_terminal_shows_each_stage_with_elapsed_time() -> None:
    buf = io.StringIO()
    _run(Console(file=buf, force_terminal=True, width=80))
    out = buf.getvalue()
    assert "starting vLLM" in out and "timed requests (no profiler) 3/3" in out
    assert "0:00:00" in out and "✓" in out  # elapsed-time column, finished mark


def test_pipe_gets_nothing() -> None:
    buf = io.StringIO()
    console = Console(file=buf, width=80)
    assert not console.is_terminal
    _run(console)
    assert buf.getvalue() == ""
