"""Rank files analysed in worker processes on this machine (``--jobs N``)."""

from __future__ import annotations

import multiprocessing as mp
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from phaseprof.scale.rank_task import RankResult, analyze_rank


def default_jobs() -> int:
    """Cores this process may use (cgroup/affinity aware where the OS says so)."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # not Linux
        return max(os.cpu_count() or 1, 1)


def analyze_rank_files(paths: list[Path], *, jobs: int | None = None, rule_files: list[Path] | None = None,
                       on_done: Callable[[Path], None] | None = None) -> list[RankResult]:
    """Analyse each file once; results in the order of ``paths`` whatever ``jobs`` is (deterministic output).

    ``jobs=1`` runs in this process. Workers are spawned (not forked): a fork of a process that already runs
    pyarrow/numpy threads can deadlock. Each worker streams its file and returns only a :class:`RankResult`.
    """
    jobs = min(jobs or default_jobs(), len(paths)) or 1
    rules = [str(r) for r in rule_files] if rule_files else None
    if jobs == 1:
        out = []
        for p in paths:
            out.append(analyze_rank(p, rules))
            if on_done:
                on_done(p)
        return out
    with ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("spawn")) as pool:
        futures = {pool.submit(analyze_rank, p, rules): i for i, p in enumerate(paths)}
        results: list[RankResult | None] = [None] * len(paths)
        for f in as_completed(futures):
            results[futures[f]] = f.result()  # re-raises a worker's PhaseprofError here, naming its file
            if on_done:
                on_done(paths[futures[f]])
        return [r for r in results if r is not None]
