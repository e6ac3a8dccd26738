"""Run-directory names under concurrency: captures started in the same second into one
``--out`` each get their own directory, from real concurrent processes and threads. Before names were reserved,
every one picked the same free name and all but the first lost their run at the final rename
("OSError: Directory not empty")."""

from __future__ import annotations

import multiprocessing
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from phaseprof.capture.shared.rundir import run_directory, unique_run_dir

NAME = "20261201T120000Z-server-tiny-prefill-16"  # one stamp for all: the same second
WORKERS = 6


def _write_run(root: Path, tag: str, picked: threading.Barrier | None = None) -> str:
    """One capture's directory work: pick a name, wait until every worker has picked one (the race at its
    worst), write a file and rename into place. Returns the directory's name."""
    final = unique_run_dir(root, NAME)
    if picked is not None:
        picked.wait(timeout=30)
    with run_directory(final) as tmp:
        (tmp / "run.json").write_text(tag)
    return final.name


def _process(root: str, tag: str, picked: threading.Barrier, out: multiprocessing.Queue) -> None:
    try:
        out.put((tag, _write_run(Path(root), tag, picked)))
    except BaseException as e:  # noqa: BLE001 - reported to the test
        out.put((tag, f"{type(e).__name__}: {e}"))


def _check(root: Path, results: dict[str, str]) -> None:
    assert len(results) == WORKERS
    assert len(set(results.values())) == WORKERS, results  # every worker its own directory
    assert {p.name for p in root.iterdir()} == set(results.values())  # no reservation or temp left behind
    for tag, name in results.items():
        assert (root / name / "run.json").read_text() == tag  # and each holds its own run


def test_concurrent_processes_get_unique_run_dirs(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    picked, out = ctx.Barrier(WORKERS), ctx.Queue()
    procs = [ctx.Process(target=_process, args=(str(tmp_path), f"p{i}", picked, out)) for i in range(WORKERS)]
    for p in procs:
        p.start()
    results = dict(out.get(timeout=60) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    _check(tmp_path, results)


def test_concurrent_threads_get_unique_run_dirs(tmp_path: Path) -> None:
    picked = threading.Barrier(WORKERS)
    with ThreadPoolExecutor(WORKERS) as pool:
        names = list(pool.map(lambda i: _write_run(tmp_path, f"t{i}", picked), range(WORKERS)))
    _check(tmp_path, {f"t{i}": n for i, n in enumerate(names)})


def test_finished_and_failed_runs_keep_their_names_taken_or_free(tmp_path: Path) -> None:
    first = _write_run(tmp_path, "a")
    assert first == NAME and _write_run(tmp_path, "b") == f"{NAME}-2"  # a finished run's name stays taken
    with pytest.raises(RuntimeError), run_directory(unique_run_dir(tmp_path, NAME)):
        raise RuntimeError("the capture failed")
    assert sorted(p.name for p in tmp_path.iterdir()) == [NAME, f"{NAME}-2"]  # nothing half-written is left
    assert _write_run(tmp_path, "c") == f"{NAME}-3"  # and the failed run's name is free again


def test_an_out_that_cannot_hold_runs_is_one_error(tmp_path: Path) -> None:
    from phaseprof.errors import PhaseprofError

    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(PhaseprofError, match=r"file: cannot make the output directory \(--out\)"):
        unique_run_dir(tmp_path / "file", NAME)
    with pytest.raises(PhaseprofError, match=r"cannot write a run directory here \(--out\): File name too long"):
        unique_run_dir(tmp_path, "x" * 300)
