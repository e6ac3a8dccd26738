#!/usr/bin/env python
"""What typer costs ``phaseprof analyze``: the figure that keeps its typer-free parser (``commands.analyze.parse``).

Contenders, each a fresh process, rounds interleaved (``children.interleaved``), median and best wall of the rounds:

- **plain**: ``phaseprof analyze TRACE --format json`` as shipped (no typer on that command line);
- **typer**: the same command line through typer's command (the plain parser turned off in the child; the process
  still ends without the interpreter's teardown, as the plain one does);
- **help**: ``phaseprof --help`` (typer, click and every command's module);
- **python**: ``python -c pass`` (the interpreter alone).

Then ``python -X importtime`` of typer, pydantic (typer's option coercion imports it when it builds a command) and
rich.console, each alone in a fresh process: median of the rounds' cumulative import times.

Usage::

    python benchmarks/bench_cli.py                  # a committed trace, 9 rounds
    python benchmarks/bench_cli.py TRACE --repeat 15
"""

from __future__ import annotations

import argparse
import compileall
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from children import ChildRun, Command, interleaved, load_average  # noqa: E402

#: A real capture small enough that start-up is a large part of its analysis.
TRACE = ROOT / "traces/h200/eager/20261130T094747Z-h200-qwen3.5-35b-a3b-decode-128in-32out/trace.json.gz"

_PLAIN_CHILD = """
import sys
from phaseprof.commands import main
sys.argv = ["phaseprof", "analyze", sys.argv[1], "--format", "json"]
sys.exit(main.entry())
"""

_TYPER_CHILD = """
import sys
from phaseprof.commands import analyze, main
parse = analyze.parse
analyze.parse = lambda argv: None  # main routes the command line to typer
main._plain_analyze = lambda words: parse(words) is not None  # and still ends without the interpreter's teardown
sys.argv = ["phaseprof", "analyze", sys.argv[1], "--format", "json"]
sys.exit(main.entry())
"""

IMPORTS = ("typer", "pydantic", "rich.console")


def contenders(trace: Path) -> dict[str, Command]:
    py, env = sys.executable, {"PYTHONPATH": str(ROOT)}
    return {"plain": ([py, "-c", _PLAIN_CHILD, str(trace)], env),
            "typer": ([py, "-c", _TYPER_CHILD, str(trace)], env),
            "help": ([py, "-m", "phaseprof.commands.main", "--help"], env),
            "python": ([py, "-c", "pass"], {})}


def import_ms(module: str) -> float:
    """``module``'s cumulative import time in a fresh interpreter (``-X importtime``), in ms."""
    err = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {module}"], capture_output=True,
                         text=True, check=True, cwd=ROOT).stderr
    line = next(ln for ln in reversed(err.splitlines()) if ln.rsplit("|", 1)[-1].strip() == module)
    return int(line.split("|")[1]) / 1000


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", nargs="?", type=Path, default=TRACE)
    ap.add_argument("--repeat", type=int, default=9, help="rounds (default 9); the first, warming, is extra")
    args = ap.parse_args(argv)
    print(f"trace: {args.trace} ({args.trace.stat().st_size / 1e6:.1f} MB stored)")
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
          f"load average before: {load_average()}; {args.repeat} interleaved round(s) after one warming round")
    # Compiled bytecode, as an installed package has it (PYTHONDONTWRITEBYTECODE, set on this project's machines,
    # would have each child compile every phaseprof module it imports).
    compileall.compile_dir(str(ROOT / "phaseprof"), quiet=1)
    c = contenders(args.trace)
    interleaved(c, 1, cwd=str(ROOT))  # .pyc files and the page cache
    runs = interleaved(c, args.repeat, cwd=str(ROOT))
    imports = {m: statistics.median(import_ms(m) for _ in range(args.repeat)) for m in IMPORTS}
    print(f"load average after: {load_average()}")
    same = all(r.stdout == runs["plain"][0].stdout for k in ("plain", "typer") for r in runs[k])
    print(f"analyze JSON identical, plain and typer, every round: {same}\n")
    print(f"{'contender':10s} {'median s':>9s} {'best s':>8s} {'CPU s':>7s}")
    for name, rs in runs.items():
        print(f"{name:10s} {_median(rs, 'wall_s'):9.3f} {min(r.wall_s for r in rs):8.3f} {_median(rs, 'cpu_s'):7.3f}")
    extra = _median(runs["typer"], "wall_s") - _median(runs["plain"], "wall_s")
    best = min(r.wall_s for r in runs["typer"]) - min(r.wall_s for r in runs["plain"])
    extra_cpu = _median(runs["typer"], "cpu_s") - _median(runs["plain"], "cpu_s")
    # CPU is the figure to read on a loaded machine: the medians of wall move with other work's bursts.
    print(f"\ntyper's path: {extra_cpu * 1000:+.0f} ms CPU ({extra_cpu / _median(runs['plain'], 'cpu_s'):+.0%}), "
          f"{extra * 1000:+.0f} ms wall (medians), {best * 1000:+.0f} ms best wall")
    print("import (-X importtime, cumulative, median): "
          + ", ".join(f"{m} {ms:.1f} ms" for m, ms in imports.items()))
    return 0 if same else 1


def _median(runs: list[ChildRun], field: str) -> float:
    return statistics.median(getattr(r, field) for r in runs)


if __name__ == "__main__":
    sys.exit(main())
