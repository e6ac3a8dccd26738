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

    def __reduce__(self):  # worker processes and Ray tasks send errors back pickled: keep path and exit code
        return _restore, (type(self), str(self), self.path, self.exit_code)


def _restore(cls: type[PhaseprofError], text: str, path: str | None, exit_code: int) -> PhaseprofError:
    err = cls.__new__(cls)
    Exception.__init__(err, text)
    err.path, err.exit_code = path, exit_code
    return err


class TraceError(PhaseprofError):
    """A trace file that cannot be read or makes no sense (names the file and the problem)."""


class EnvironmentProblem(PhaseprofError):
    """Something missing on this machine (vLLM not installed, no CUDA, ...)."""

    exit_code = 3
