"""phaseprof's own processes leave pyarrow out (``phaseprof.lean_process``): the program and its rank workers run
without it, give the same numbers as a process with it, and anything else (tests, library users, the dashboard)
keeps it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
import multiprocessing as mp

import pytest

from phaseprof.lean_process import KEEP_ENV, SPLIT_ENV, init_rank_worker
from phaseprof.scale.local import _main_not_reimported

from .conftest import REPO

#: Real traces whose tables hold many strings: a CPU-engine run, an eager H200 prefill with its nn.Module tree
#: (hooks), a graph-mode H200 decode and a two-rank TP2+EP directory (rank workers).
TRACES = ["traces/cpu/tiny-hybrid-prefill128-decode8",
          "traces/h200/hooks/eager-prefill-4096/trace.json.gz",
          "traces/h200/graph/20261130T094743Z-h200-qwen3.5-35b-a3b-decode-128in-32out/trace.json.gz"]
RANKS = "traces/h200x2/server-tp2-ep/decode-step1"

_PROBE = ("import sys, pandas\n"
          "print(sys.modules.get('pyarrow', 'absent') is None, pandas.Series(['a']).dtype.storage"
          " if hasattr(pandas.Series(['a']).dtype, 'storage') else 'object')")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != KEEP_ENV}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return {**env, **extra}


def _program(args: list[str], **env: str) -> bytes:
    res = subprocess.run([sys.executable, "-m", "phaseprof.commands.main", *args], capture_output=True, env=_env(**env),
                         cwd=REPO, timeout=600)
    assert res.returncode == 0, res.stderr.decode()[-2000:]
    return res.stdout


@pytest.mark.parametrize("trace", TRACES, ids=lambda t: t.split("/")[2][:40])
def test_program_without_pyarrow_gives_the_same_breakdown(trace: str) -> None:
    lean = _program(["analyze", "--format", "json", trace])
    kept = _program(["analyze", "--format", "json", trace], **{KEEP_ENV: "1"})
    assert json.loads(lean)["steps"], "no steps: the comparison would be empty"
    assert lean == kept


def test_rank_workers_without_pyarrow_give_the_same_report() -> None:
    lean = _program(["analyze", "--format", "json", "--jobs", "2", RANKS])
    kept = _program(["analyze", "--format", "json", "--jobs", "1", RANKS], **{KEEP_ENV: "1"})
    assert len(json.loads(lean)["ranks"]) == 2
    assert lean == kept


def test_leaving_pyarrow_out_switches_pandas_to_python_strings() -> None:
    code = "from phaseprof.lean_process import leave_out_pyarrow\nassert leave_out_pyarrow()\n" + _PROBE
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), check=True)
    blocked, storage = out.stdout.split()
    assert blocked == "True"
    assert storage in ("python", "object")  # pandas 3: python-backed str; pandas 2: object columns


def test_keep_env_and_an_imported_pandas_keep_pyarrow() -> None:
    code = "from phaseprof.lean_process import leave_out_pyarrow\nprint(leave_out_pyarrow())\n" + _PROBE
    kept = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(**{KEEP_ENV: "1"}),
                          check=True).stdout.split()
    assert kept[:2] == ["False", "False"]
    late = subprocess.run([sys.executable, "-c", "import pandas\n" + code], capture_output=True, text=True,
                          env=_env(), check=True).stdout.split()
    assert late[:2] == ["False", "False"], "pandas already imported: blocking pyarrow now would half-break it"


def _worker_state() -> tuple[bool, str | None]:
    return sys.modules.get("pyarrow", "absent") is None, os.environ.get(SPLIT_ENV)


def test_rank_worker_initializer_runs_before_pandas() -> None:
    """A spawned worker imports its initializer's module first: that module must not pull pandas in, or the block
    comes too late (it is a no-op once pandas is imported)."""
    env_before = os.environ.get(KEEP_ENV)
    os.environ.pop(KEEP_ENV, None)
    try:
        # As analyze_rank_files starts its workers: a spawned worker would re-run the parent's __main__ (under
        # pytest, possibly a Streamlit AppTest script an earlier test left there).
        with _main_not_reimported(), ProcessPoolExecutor(1, mp_context=mp.get_context("spawn"),
                                                         initializer=init_rank_worker) as pool:
            blocked, split = pool.submit(_worker_state).result(timeout=120)
    finally:
        if env_before is not None:
            os.environ[KEEP_ENV] = env_before
    assert blocked
    assert split == "0"


@pytest.mark.parametrize(("argv", "blocked"), [(["analyze", "--help"], True), (["--version"], True),
                                                (["capture", "--help"], False), (["sweep", "--help"], False),
                                                (["ceilings", "--help"], False)])
def test_engine_commands_keep_pyarrow(argv: list[str], blocked: bool) -> None:
    """The program leaves pyarrow out, except for the commands that run vLLM or torch in its process."""
    code = ("import sys\nfrom phaseprof.commands.main import entry\nsys.argv = ['phaseprof', *sys.argv[1:]]\n"
            "try:\n    entry()\nfinally:\n    print('BLOCKED', sys.modules.get('pyarrow', 'absent') is None)\n")
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, env=_env(),
                         timeout=120)
    assert f"BLOCKED {blocked}" in out.stdout, out.stdout[-2000:] + out.stderr[-2000:]


@pytest.mark.parametrize(("argv", "single"), [(["analyze", "--help"], True), (["--version"], True),
                                               (["capture", "--help"], False), (["sweep", "--help"], False)])
def test_blas_single_threaded_except_for_engine_commands(argv: list[str], single: bool) -> None:
    """The program sets one BLAS thread before numpy loads (where the user set no count), except for the commands
    that run vLLM or torch in its process; a count the user set is kept."""
    code = ("import os, sys\nfrom phaseprof.commands.main import entry\nsys.argv = ['phaseprof', *sys.argv[1:]]\n"
            "try:\n    entry()\nexcept SystemExit:\n    pass\n"
            "finally:\n    print('BLAS', [os.environ.get(v) for v in ('OPENBLAS_NUM_THREADS', 'OMP_NUM_THREADS')])\n")
    env = {k: v for k, v in _env().items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env, timeout=120)
    want = "['1', '1']" if single else "[None, None]"
    assert f"BLAS {want}" in out.stdout, out.stdout[-2000:] + out.stderr[-2000:]
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120,
                         env={**env, "OPENBLAS_NUM_THREADS": "3"})
    assert "BLAS ['3'," in out.stdout, out.stdout[-2000:] + out.stderr[-2000:]


def test_gc_paused_and_frozen_for_the_first_read_in_the_program_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The program reads its first trace with the cyclic GC off until the tables are built and then freezes what
    exists (the first collection after the read no longer walks it); a test or library process calling the same
    code keeps its GC as it was."""
    import gc

    from phaseprof.commands import analyze_plain
    from phaseprof.trace import read

    trace = REPO / TRACES[1]
    after_read: list[bool] = []  # the GC's state as load_tables returns (it pauses the GC itself while reading)
    load = read.load_tables
    monkeypatch.setattr(read, "load_tables", lambda *a, **k: (load(*a, **k), after_read.append(gc.isenabled()))[0])
    frozen = gc.get_freeze_count()
    tables = analyze_plain._first_tables(trace, None, lambda: None)
    assert len(tables.gpu) and after_read == [True] and gc.isenabled() and gc.get_freeze_count() == frozen
    monkeypatch.setattr(analyze_plain, "own_process", lambda: True)
    try:
        tables = analyze_plain._first_tables(trace, None, lambda: None)
        assert len(tables.gpu) and after_read == [True, False]  # still off as the read ends ...
        assert gc.isenabled() and gc.get_freeze_count() > frozen  # ... then on, with what exists frozen
    finally:
        gc.unfreeze()
        gc.enable()
