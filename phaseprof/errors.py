"""Errors the CLI turns into one clear line and a non-zero exit (never a traceback)."""

from __future__ import annotations

from pathlib import Path


class PhaseprofError(Exception):
    """A user-facing failure. ``exit_code`` 2 = bad input/usage, 1 = a check failed, 3 = environment."""

    exit_code: int = 2

    def __init__(self, message: str, *, path: str | Path | None = None, exit_code: int | None = None):
        self.path = str(path) if path is not None else None
        if exit_code is not None:
            self.exit_code = exit_code
        super().__init__(f"{self.path}: {message}" if self.path else message)


class TraceError(PhaseprofError):
    """A trace file that cannot be read or makes no sense (names the file and the problem)."""


class EnvironmentProblem(PhaseprofError):
    """Something missing on this machine (vLLM not installed, no CUDA, ...)."""

    exit_code = 3
