"""vLLM's own output during a capture: always in a log file (kept in each run directory as ``vllm.log``), on
the terminal only with ``--verbose``.

vLLM writes from several layers, so Python logging alone cannot quiet it: its INFO lines (a logging handler on
``sys.stdout``), tqdm bars ("Capturing CUDA graphs ... 67/67", on ``sys.stderr``), Triton and NUMA warnings
printed by C++ (``[W... utils.cpp] Warning: NUMA binding``) and Kineto's ``USDT:`` lines (C-level stdout). Without
``--verbose`` file descriptors 1 and 2 are pointed at the log file while vLLM works, and phaseprof's own console
writes to a duplicate of the original stdout. With ``--verbose`` nothing is redirected and vLLM's log records
are also copied to the file (C-level lines then reach only the terminal).
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import IO

from rich.console import Console

LOG_NAME = "vllm.log"


class VllmOutput:
    """Context manager around everything vLLM does in a capture (import, start, requests, profiling, close)."""

    def __init__(self, console: Console, *, verbose: bool) -> None:
        self.console = console
        self.verbose = verbose
        fd, name = tempfile.mkstemp(prefix="phaseprof-vllm-", suffix=".log")
        os.close(fd)
        self.path = Path(name)
        self._log: IO[bytes] | None = None
        self._saved_fds: tuple[int, int] | None = None
        self._terminal: IO[str] | None = None
        self._saved_file: IO[str] | None = None
        self._saved_width: int | None = None
        self._handler: logging.Handler | None = None
        self._streams: list[tuple[logging.StreamHandler, IO[str]]] = []
        self._log_text: IO[str] | None = None

    def __enter__(self) -> VllmOutput:
        if self.verbose:
            # vLLM configures its logger with dictConfig when it is imported, which would drop a handler added
            # before: import it first (a capture imports it next anyway).
            try:
                import vllm.logger  # noqa: F401, PLC0415
            except ImportError:
                return self
            self._handler = logging.FileHandler(self.path, encoding="utf-8")
            self._handler.setFormatter(logging.Formatter("%(levelname)s %(asctime)s [%(name)s] %(message)s"))
            logging.getLogger("vllm").addHandler(self._handler)
            return self
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        self._saved_width = self.console.width  # measured on the real terminal before fd 1 moves
        self._saved_file = self.console.file
        self._saved_fds = (os.dup(1), os.dup(2))
        self._terminal = os.fdopen(os.dup(self._saved_fds[0]), "w", encoding="utf-8", errors="replace",
                                   buffering=1)
        self.console.file = self._terminal
        self.console.width = self._saved_width
        self._log = open(self.path, "ab", buffering=0)  # noqa: SIM115 - closed in __exit__
        os.dup2(self._log.fileno(), 1)
        os.dup2(self._log.fileno(), 2)
        # vLLM's log handlers hold the sys.stdout object of import time, which need not be fd 1 (under pytest it
        # is a capture buffer): point them at the log file directly.
        self._log_text = open(self.path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115
        for h in logging.getLogger("vllm").handlers:
            if type(h) is logging.StreamHandler:
                self._streams.append((h, h.setStream(self._log_text)))  # type: ignore[arg-type]
        return self

    def __exit__(self, *exc: object) -> None:
        if self._handler is not None:
            logging.getLogger("vllm").removeHandler(self._handler)
            self._handler.close()
            self._handler = None
        if self._saved_fds is None:
            return
        for h, stream in self._streams:
            h.setStream(stream)
        self._streams = []
        if self._log_text is not None:
            self._log_text.close()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os.dup2(self._saved_fds[0], 1)
        os.dup2(self._saved_fds[1], 2)
        for fd in self._saved_fds:
            os.close(fd)
        self._saved_fds = None
        self.console.file = self._saved_file  # type: ignore[assignment]
        if self._terminal is not None:
            self._terminal.close()
        if self._log is not None:
            self._log.close()

    def copy_into(self, directory: Path) -> Path:
        """Copy the log so far into a (temporary) run directory."""
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        dest = directory / LOG_NAME
        shutil.copyfile(self.path, dest)
        return dest

    def discard(self) -> None:
        """Remove the temporary log (after a successful run: each run directory has its copy)."""
        self.path.unlink(missing_ok=True)
