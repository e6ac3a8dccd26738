"""``phaseprof analyze`` reads its trace before it imports the analysis (``phaseprof.commands.main.COMMAND_MODULES``,
``report/analyze.py``), and the analysis' imports then overlap the read (``trace.read.load_tables(meanwhile=)``).
A plain ``phaseprof analyze`` command line runs without typer (``commands.analyze.parse``); typer's command is built
from the same declaration (``commands.analyze.PARAMS``), and the two must read a command line alike.

What a run has imported when it first opens the trace is checked here, not how long that took (the figure is
``benchmarks/bench_loader.py``'s "startup")."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import typer

from phaseprof.commands import main as cli

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
from phaseprof.commands.main import entry
entry()
"""


@pytest.mark.parametrize("fmt", ["json", "table"])
def test_analyze_reads_the_trace_before_importing_the_analysis(fmt: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    res = subprocess.run([sys.executable, "-c", _AT_FIRST_READ, TRACE, "analyze", "--format", fmt, TRACE],
                         capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    imported = set(json.loads(res.stdout))
    heavy = {"pandas", "typer", "pydantic", "phaseprof.analysis", "phaseprof.classify", "phaseprof.sol", "phaseprof.report.table",
             "phaseprof.capture", "phaseprof.commands.diff", "phaseprof.dashboard", "phaseprof.pareto",
             "phaseprof.memory", "phaseprof.scale"}
    if fmt == "json":
        heavy.add("rich.console")  # a table's spinner needs it before the read
    assert not heavy & imported, sorted(heavy & imported)
    # The read starts on a thread (trace.readahead) before the loader's own imports (numpy, msgspec, the scanner),
    # which then overlap it: whether they have begun by the thread's first open is a race, not checked.
    assert {"phaseprof.commands.analyze", "phaseprof.commands.analyze_plain", "phaseprof.trace.readahead"} <= imported


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


def test_every_keyword_of_the_run_is_declared_once_and_typer_offers_it() -> None:
    import inspect

    from phaseprof.commands import analyze

    assert list(inspect.signature(analyze.run).parameters) == list(analyze.PARAMS)
    cmd = typer.main.get_command(cli._register("analyze")).commands["analyze"]  # type: ignore[attr-defined]
    assert {p.name: tuple(p.opts) for p in cmd.params if p.name != "help"} == \
        {key: param.names or (key,) for key, param in analyze.PARAMS.items()}
    assert cmd.help is not None and cmd.help.startswith("Break a trace down by step")


@pytest.mark.parametrize("argv", [
    [], ["--help"], ["t.json", "--help"], ["-h"], ["t.json", "--json"], ["t.json", "-f"], ["t.json", "-fjson"],
    ["t.json", "-f", "JSON"], ["t.json", "-f", "json", "-f", "json"], ["t.json", "--jobs", "0"],
    ["t.json", "-j", "x"], ["t.json", "--json", "-"], ["t.json", "--full-names=1"], ["t.json", "--no-full-names"],
    ["t.json", "--"], ["-x.json"], ["t.json", "--rules", ""], ["t.json", "--full-names", "--full-names"],
    ["t.json", "--reader", "rust"], ["t.json", "--reader", "Native"], ["t.json", "--verbose=1"],
])
def test_the_plain_parser_leaves_to_typer_what_it_is_not_sure_of(argv: list[str]) -> None:
    from phaseprof.commands import analyze

    assert analyze.parse(argv) is None


def test_the_plain_parser_reads_what_typer_reads() -> None:
    from phaseprof.commands import analyze

    argv = ["a.json", "-f", "json", "--rules", "r1.toml", "b.json.gz", "--rules=r2.toml", "--full-names", "-j", "3",
            "--steps=4:8", "--json", "out", "--reader", "python", "-v", "-", "--cross-check", "shapes",
            "--model-config=m.json", "--by", "layer", "--graph-reference", "g.json", "--ceilings", "spec",
            "--ray", "auto"]
    got = analyze.parse(argv)
    assert got is not None and set(got) == set(analyze.PARAMS)  # every option, once
    seen: dict = {}
    cmd = typer.main.get_command(cli._register("analyze")).commands["analyze"]  # type: ignore[attr-defined]
    ctx = cmd.make_context("analyze", list(argv))
    seen = {k: v for k, v in ctx.params.items() if v not in (None, False, [], ())}
    assert {k: v for k, v in got.items() if v not in (None, False, [], ())} == \
        {k: list(v) if isinstance(v, tuple) else v for k, v in seen.items()}


@pytest.mark.parametrize("argv, says", [
    (["t.json", "--jobs", "0"], "Invalid value for '--jobs' / '-j'"),
    (["t.json", "-f", "JSON"], "Invalid value for '--format' / '-f'"),
    (["t.json", "--reader", "rust"], "Invalid value for '--reader'"),
])
def test_typer_refuses_the_values_the_plain_parser_leaves_to_it(argv: list[str], says: str,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["analyze", *argv]) == 2
    assert says in capsys.readouterr().err


def test_plain_and_typer_runs_print_the_same(capsys: pytest.CaptureFixture[str]) -> None:
    trace = str(REPO / "traces/cpu/tiny-hybrid-prefill128-decode8")
    assert cli.main(["analyze", "--format", "json", trace]) == 0
    plain = capsys.readouterr().out
    app = cli._register("analyze")
    app(args=["analyze", "--format", "json", trace], standalone_mode=False)
    assert capsys.readouterr().out == plain and plain.startswith("{")


def test_bench_cli_runs_both_paths_to_the_same_json() -> None:
    """benchmarks/bench_cli.py, one round: its plain and typer contenders must print the same analysis."""
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_cli.py"), "--repeat", "1"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:] + proc.stdout
    assert "analyze JSON identical, plain and typer, every round: True" in proc.stdout, proc.stdout
    assert "typer's path: " in proc.stdout and "import (-X importtime" in proc.stdout, proc.stdout
