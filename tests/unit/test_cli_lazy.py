"""``phaseprof analyze`` reads its trace before it imports the analysis (``phaseprof.cli.COMMAND_MODULES``,
``report/analyze_cli.py``), and the analysis' imports then overlap the read (``trace.read.load_tables(meanwhile=)``).

What a run has imported when it first opens the trace is checked here, not how long that took (the figure is
``benchmarks/bench_loader.py``'s "startup")."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import typer

from phaseprof import cli

from ..conftest import REPO

TRACE = "traces/h200/graph/20261130T094743Z-h200-qwen3.5-35b-a3b-decode-128in-32out/trace.json.gz"

#: Runs ``phaseprof ARGS``; at the loader's first open of the trace (``open`` / ``os.open``: the first byte of the
#: read, as the benchmark's start-up figure counts it), prints the modules imported so far and exits.
_AT_FIRST_READ = r"""
import builtins, json, os, sys
trace = os.path.realpath(sys.argv[1])
def stop(path):
    try:
        hit = os.path.realpath(os.fsdecode(path)) == trace
    except (TypeError, ValueError):
        hit = False
    if hit:
        print(json.dumps(sorted(sys.modules))); sys.stdout.flush(); os._exit(0)
_open, _os_open = builtins.open, os.open
builtins.open = lambda f, *a, **k: (stop(f) if isinstance(f, (str, bytes, os.PathLike)) else None, _open(f, *a, **k))[1]
os.open = lambda f, *a, **k: (stop(f), _os_open(f, *a, **k))[1]
sys.argv = ["phaseprof", *sys.argv[2:]]
from phaseprof.cli import entry
entry()
"""


@pytest.mark.parametrize("fmt", ["json", "table"])
def test_analyze_reads_the_trace_before_importing_the_analysis(fmt: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    res = subprocess.run([sys.executable, "-c", _AT_FIRST_READ, TRACE, "analyze", "--format", fmt, TRACE],
                         capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    imported = set(json.loads(res.stdout))
    heavy = {"pandas", "phaseprof.analysis", "phaseprof.classify", "phaseprof.sol", "phaseprof.report.table",
             "phaseprof.capture", "phaseprof.report.diff_cli", "phaseprof.dashboard", "phaseprof.pareto",
             "phaseprof.memory", "phaseprof.scale"}
    if fmt == "json":
        heavy.add("rich.console")  # a table's spinner needs it before the read
    assert not heavy & imported, sorted(heavy & imported)
    assert {"phaseprof.report.analyze_cli", "phaseprof.trace.read"} <= imported


def test_every_command_is_registered_by_its_listed_module() -> None:
    by_module: dict[str, list[str]] = {}
    for command, module in cli.COMMAND_MODULES.items():
        by_module.setdefault(module, []).append(command)
    for module, commands in by_module.items():
        app = typer.Typer()
        __import__(module, fromlist=["register"]).register(app)
        assert [c.name for c in app.registered_commands] == commands, module


def test_the_full_app_lists_commands_in_order_after_one_was_registered(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["analyze", "--help"]) == 0
    assert [c.name for c in cli.app.registered_commands] == list(cli.COMMAND_MODULES)
    capsys.readouterr()
