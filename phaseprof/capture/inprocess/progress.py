"""Progress of a capture on a terminal: one line per stage (engine start, warm-up, timed reps, profiled run,
trace export, analysis) with its elapsed time; nothing at all when the output is not a terminal (CI logs, pipes).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn


class Stages:
    """A rich Progress with one task per stage, or a no-op when ``console`` is not a terminal.

    Use as a context manager around the whole capture; ``stage()`` around each step of it.
    """

    def __init__(self, console: Console) -> None:
        self.console = console
        self._progress: Progress | None = None
        self._depth = 0
        self.prefix = ""  # e.g. "prefill 4096: ", set while one capture of several runs

    @property
    def live(self) -> bool:
        return self._progress is not None

    def __enter__(self) -> Stages:
        self._depth += 1
        if self._depth == 1 and self.console.is_terminal:
            self._progress = Progress(SpinnerColumn(finished_text="[green]✓[/]"), TimeElapsedColumn(),
                                      TextColumn("{task.description}"), console=self.console, transient=False)
            self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._depth -= 1
        if self._depth == 0 and self._progress is not None:
            self._progress.stop()
            self._progress = None

    @contextmanager
    def stage(self, text: str, *, total: int | None = None) -> Iterator[Callable[..., None]]:
        """A stage shown as ``text`` (plus ``done/total`` when ``total`` is given) until the block ends.

        Yields ``update(done=None, detail=None)``: the count so far and/or a dim detail (e.g. vLLM's last log
        line) shown after the text while the stage runs.
        """
        progress = self._progress
        if progress is None:
            yield _ignore
            return
        state: dict[str, Any] = {"done": 0, "detail": ""}

        def label(final: bool = False) -> str:
            count = f" {state['done']}/{total}" if total is not None else ""
            detail = f"  [dim]{state['detail']}[/]" if state["detail"] and not final else ""
            return f"{self.prefix}{text}{count}{detail}"

        task: TaskID = progress.add_task(label(), total=1)

        def update(done: int | None = None, detail: str | None = None) -> None:
            if done is not None:
                state["done"] = done
            if detail is not None:
                state["detail"] = " ".join(detail.split())[:80]
            progress.update(task, description=label())

        try:
            yield update
        finally:
            progress.update(task, description=label(final=True), completed=1)


def _ignore(*_args: object, **_kwargs: object) -> None:
    return None


def quiet_stages() -> Stages:
    """Stages that never draw (library callers that pass no progress)."""
    return Stages(Console(file=io.StringIO()))
