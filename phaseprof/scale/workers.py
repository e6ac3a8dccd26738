"""How rank workers start (``--jobs N``): forked from a server that imported the analysis once, where the OS has
one (``forkserver``: Linux, macOS), else spawned.

Why: a spawned worker imports pandas, numpy and the analysis itself before its first file. Measured on a 16-core
H200 host (``benchmarks/bench_ranks.py``, 16 rank files of 157 MB): those imports took 1.5-2.6 s per worker when
16 ran at once, longer than the worker's analysis of its file (0.9-1.6 s), so ``--jobs 16`` was only 2.9x the
sequential run. The forkserver imports once; each worker is a fork of it and starts with everything imported.
The server is a fresh process (started like a spawned worker), so the fork-after-threads hazard that made
workers spawned does not apply: it leaves pyarrow out (``lean_process``) and its BLAS single-threaded before
numpy loads, and starts no thread of its own. It starts before the parent imports the analysis
(:func:`start_early`), so the two import at the same time.

This module imports nothing heavy: the command line calls it before it imports pandas.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from multiprocessing.context import BaseContext

#: Imported once by the forkserver (``worker_preload.py``), before it forks any worker.
PRELOAD = "phaseprof.scale.worker_preload"
#: ``PHASEPROF_WORKERS=spawn`` starts every worker fresh (the earlier way; for comparison and as an escape hatch).
START_ENV = "PHASEPROF_WORKERS"


def default_jobs() -> int:
    """Cores this process may use (cgroup/affinity aware where the OS says so)."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # not Linux
        return max(os.cpu_count() or 1, 1)


def clamp_jobs(jobs: int | None, files: int) -> int:
    """Worker processes for ``files`` rank files: ``jobs`` (default: every usable core), never more than the cores
    nor the files (``-j 10000`` on 200 files started ~289 processes and ~800 MB), at least 1."""
    return max(min(jobs or default_jobs(), default_jobs(), files), 1)


def worker_context() -> BaseContext:
    """The start method of rank workers: the preloading forkserver where there is one, else spawn."""
    if os.environ.get(START_ENV) != "spawn" and "forkserver" in mp.get_all_start_methods():
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload([PRELOAD])
        return ctx
    return mp.get_context("spawn")


def start_early(jobs: int | None, files: int) -> None:
    """Start the forkserver now, when ``files`` will be analysed in more than one worker, so that its imports run
    beside the caller's; a no-op where workers are spawned or run in this process."""
    ctx = worker_context()
    if clamp_jobs(jobs, files) > 1 and ctx.get_start_method() == "forkserver":
        from multiprocessing import forkserver  # noqa: PLC0415

        forkserver.ensure_running()
