"""Rank files analysed in worker processes on this machine (``--jobs N``)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from phaseprof.lean_process import init_rank_worker
from phaseprof.scale.rank_task import RankResult, analyze_rank
from phaseprof.scale.workers import clamp_jobs, default_jobs, worker_context
from phaseprof.trace.readers import Reader

__all__ = ["analyze_rank_files", "clamp_jobs", "default_jobs"]


@contextlib.contextmanager
def _main_not_reimported():
    """Spawned workers re-run the parent's ``__main__`` (by module name or file) before unpickling their task.
    The task here lives in this package, so nothing from ``__main__`` is needed, and re-running it can fail: a
    Streamlit script (the dashboard, its AppTest) or a console-script stub is not meant to run twice. Hide it for
    as long as the pool starts workers."""
    main = sys.modules.get("__main__")
    if main is None:
        yield
        return
    saved = {k: main.__dict__[k] for k in ("__file__", "__spec__") if k in main.__dict__}
    main.__dict__.pop("__file__", None)
    main.__dict__["__spec__"] = None
    try:
        yield
    finally:
        main.__dict__.pop("__spec__", None)
        main.__dict__.update(saved)


def analyze_rank_files(paths: list[Path], *, jobs: int | None = None, rule_files: list[Path] | None = None,
                       on_done: Callable[[Path], None] | None = None,
                       reader: Reader = Reader.AUTO) -> list[RankResult]:
    """Analyse each file once; results in the order of ``paths`` whatever ``jobs`` is (deterministic output).

    ``jobs=1`` runs in this process. Workers are forked from a server that imported the analysis once, or
    spawned where there is none (``scale/workers.py``); never forked from this process, which may run
    pyarrow/numpy threads (a fork of it can deadlock). Each worker streams its file and returns only a
    :class:`RankResult`.
    """
    jobs = clamp_jobs(jobs, len(paths))
    rules = [str(r) for r in rule_files] if rule_files else None
    if jobs == 1:
        out = []
        for p in paths:
            out.append(analyze_rank(p, rules, reader))
            if on_done:
                on_done(p)
        return out
    with _main_not_reimported(), ProcessPoolExecutor(max_workers=jobs, mp_context=worker_context(),
                                                     initializer=init_rank_worker) as pool:
        futures = {pool.submit(analyze_rank, p, rules, reader): i for i, p in enumerate(paths)}
        results: list[RankResult | None] = [None] * len(paths)
        for f in as_completed(futures):
            results[futures[f]] = f.result()  # re-raises a worker's PhaseprofError here, naming its file
            if on_done:
                on_done(paths[futures[f]])
        return [r for r in results if r is not None]
