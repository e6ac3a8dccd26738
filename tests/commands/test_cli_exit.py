"""``phaseprof analyze`` ends without the interpreter's teardown (``cli.exit_without_teardown``): its
output is whole and flushed, its exit status is the command's, and where something could still need the teardown
(another thread, a child process, Ray) the process exits normally."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from phaseprof.commands import main as cli

from ..conftest import REPO

TRACE = REPO / "traces/cpu/tiny-hybrid-prefill128-decode8/trace.json.gz"

#: The program as its console script runs it, with an exit handler that says whether the teardown ran.
_CHILD = ("import atexit, sys\n"
          "atexit.register(lambda: sys.stderr.write('teardown ran\\n'))\n"
          "sys.argv = ['phaseprof', *sys.argv[1:]]\n"
          "from phaseprof.commands.main import entry\n"
          "sys.exit(entry())\n")


def _program(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-c", _CHILD, *args], capture_output=True, text=True, env=env,
                          timeout=300)


def test_analyze_json_is_whole_and_skips_the_teardown(tmp_path: Path) -> None:
    out = tmp_path / "bd.json"
    res = _program("analyze", "-f", "json", "--json", str(out), str(TRACE))
    assert res.returncode == 0, res.stderr
    assert "teardown ran" not in res.stderr
    printed = json.loads(res.stdout)  # the whole document reached the pipe
    assert printed["phases"] and json.loads(out.read_text())["phases"] == printed["phases"]


def test_analyze_table_ends_with_its_last_line() -> None:
    res = _program("analyze", str(TRACE))
    assert res.returncode == 0, res.stderr
    assert "teardown ran" not in res.stderr
    assert res.stdout.endswith("\n") and len(res.stdout.splitlines()) > 10


def test_a_failing_analyze_keeps_its_exit_status_and_message(tmp_path: Path) -> None:
    res = _program("analyze", str(tmp_path / "missing.json.gz"))
    assert res.returncode not in (0, None)
    assert "error:" in res.stderr and "missing.json.gz" in res.stderr
    assert "teardown ran" not in res.stderr


@pytest.mark.parametrize("args", [("diff", "--help"), ("analyze", "--help")])
def test_other_commands_keep_the_teardown(args: tuple[str, ...]) -> None:
    """Other commands, and analyze's typer path (its help, an option typer must check), exit normally."""
    res = _program(*args)
    assert res.returncode == 0, res.stderr
    assert "teardown ran" in res.stderr


@pytest.fixture
def exits(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    monkeypatch.setattr(cli.os, "_exit", calls.append)
    return calls


def test_exits_at_once_when_nothing_else_runs(exits: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    # This test process may hold threads, children or Ray left by other tests: the program's state is set here.
    import multiprocessing

    monkeypatch.setattr(threading, "active_count", lambda: 1)
    monkeypatch.delitem(sys.modules, "ray", raising=False)
    monkeypatch.setattr(multiprocessing, "active_children", lambda: [])
    cli.exit_without_teardown(3)
    assert exits == [3]


def test_keeps_the_teardown_while_another_thread_runs(exits: list[int]) -> None:
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        cli.exit_without_teardown(0)
    finally:
        stop.set()
        t.join()
    assert exits == []


def test_keeps_the_teardown_under_ray(exits: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", object())
    cli.exit_without_teardown(0)
    assert exits == []


@pytest.mark.parametrize("args, code", [(["analyze", "--jobs", "0", str(TRACE)], 2),
                                        (["analyze", "/nonexistent/trace.json"], 2),
                                        (["analyze", "-f", "json", str(TRACE)], 0)])
def test_python_dash_m_phaseprof_exits_with_the_commands_status(args: list[str], code: int) -> None:
    """``python -m phaseprof`` is the console script: a usage error or a missing file is a non-zero exit."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    res = subprocess.run([sys.executable, "-m", "phaseprof", *args], capture_output=True, text=True, env=env,
                         timeout=300)
    assert res.returncode == code, res.stderr
