"""Rank workers are forked from a server that imported the analysis once (``scale/workers.py``), set up as the
spawned workers were (pyarrow left out, no split read), BLAS single-threaded; ``PHASEPROF_WORKERS=spawn`` still
spawns them fresh."""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
from concurrent.futures import ProcessPoolExecutor

import pytest

from phaseprof.lean_process import SPLIT_ENV, init_rank_worker
from phaseprof.scale import workers
from phaseprof.scale.local import _main_not_reimported


def _probe() -> dict:
    """What a worker has at the start of its first task (runs in the worker)."""
    return {"parent": os.getppid(), "analysis_imported": "phaseprof.scale.rank_task" in sys.modules,
            "pyarrow_blocked": "pyarrow" in sys.modules and sys.modules["pyarrow"] is None,
            "split": os.environ.get(SPLIT_ENV), "blas": os.environ.get("OPENBLAS_NUM_THREADS")}


def _run_probe() -> dict:
    with _main_not_reimported(), ProcessPoolExecutor(1, mp_context=workers.worker_context(),
                                                     initializer=init_rank_worker) as pool:
        return pool.submit(_probe).result(timeout=300)


@pytest.mark.skipif("forkserver" not in mp.get_all_start_methods(), reason="this OS has no forkserver")
def test_workers_fork_from_a_server_that_imported_the_analysis(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(workers.START_ENV, raising=False)
    assert workers.worker_context().get_start_method() == "forkserver"
    got = _run_probe()
    assert got["parent"] != os.getpid()  # a child of the server, not of this process
    assert got["analysis_imported"] and got["pyarrow_blocked"]
    assert got["split"] == "0" and got["blas"] == "1"


def test_spawn_on_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(workers.START_ENV, "spawn")
    assert workers.worker_context().get_start_method() == "spawn"
    got = _run_probe()
    assert got["parent"] == os.getpid()  # started by this process, fresh
    assert got["pyarrow_blocked"] and got["split"] == "0"


def test_start_early_only_when_workers_will_run(monkeypatch: pytest.MonkeyPatch) -> None:
    from multiprocessing import forkserver

    started = []
    monkeypatch.setattr(forkserver, "ensure_running", lambda: started.append(True))
    monkeypatch.delenv(workers.START_ENV, raising=False)
    workers.start_early(1, 8)  # --jobs 1: everything in this process
    workers.start_early(4, 1)  # one file: one process
    assert started == []
    if "forkserver" in mp.get_all_start_methods() and workers.default_jobs() > 1:
        workers.start_early(2, 2)
        assert started == [True]
