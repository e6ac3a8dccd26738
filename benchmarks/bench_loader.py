#!/usr/bin/env python
"""The trace loader against its limits (issue 28), every figure as a ratio to a reference measured in the same run.

Contenders, each a fresh process, rounds interleaved (a, b, c, a, b, c, ...: a burst of load from other work on a
shared machine falls on all of them), best wall of the rounds:

- **native**: ``python -m phaseprof.cli analyze --format json TRACE`` as shipped (the native scanner);
- **pure-Python**: the same with ``PHASEPROF_NATIVE=0`` (msgspec structs + ``TableBuilder.add``);
- **orjson**: ``orjson.loads`` of the same bytes already decompressed (``bench_analyze.py --child orjson``);
- **startup**: ``phaseprof analyze TRACE`` from process start to its first read of the trace file (the child
  stops there): interpreter, imports, option parsing;
- **loader only**: ``load_tables`` alone in a process, native and pure-Python (MB of decompressed JSON per second
  of the process's wall time, start-up included).

Peak memory: the analysing process's RSS plus its forked reader's own pages (``bench_analyze.wait_sampling``),
against the decompressed size. Usage::

    python benchmarks/bench_loader.py TRACE.json.gz --repeat 3           # ~115 MB: all contenders
    python benchmarks/bench_loader.py BIG.json.gz --repeat 1 --no-orjson # multi-GB: orjson would need ~9x RAM
    python benchmarks/bench_analyze.py --synthesize-mb N --synth-source T   # makes the synthetic traces (/tmp)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_analyze import gzip_size, wait_sampling  # noqa: E402

#: Targets of issue 28.
VS_ORJSON = 0.35
MEMORY_FACTOR = 1.0
STARTUP_S = 0.15
MB_PER_S = 500.0

_STARTUP_CHILD = r"""
import builtins, os, sys, time
trace = os.path.realpath(sys.argv[1])
def stop(path):
    try:
        hit = os.path.realpath(os.fsdecode(path)) == trace
    except (TypeError, ValueError):
        hit = False
    if hit:
        sys.stdout.write(repr(time.time()) + "\n"); sys.stdout.flush(); os._exit(0)
_open, _os_open = builtins.open, os.open
builtins.open = lambda f, *a, **k: (stop(f) if isinstance(f, (str, bytes, os.PathLike)) else None, _open(f, *a, **k))[1]
os.open = lambda f, *a, **k: (stop(f), _os_open(f, *a, **k))[1]
sys.argv = ["phaseprof", "analyze", "--format", "json", sys.argv[1]]
from phaseprof.lean_process import leave_out_pyarrow
leave_out_pyarrow()
from phaseprof.cli import entry
entry()
"""

_LOADER_CHILD = r"""
import sys, time, json
t0 = time.perf_counter()
from phaseprof.lean_process import leave_out_pyarrow
leave_out_pyarrow()  # as the program sets up its processes
from phaseprof.trace.read import load_tables
t1 = time.perf_counter()
tables = load_tables(sys.argv[1])
t2 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "rows": sum(len(getattr(tables, f)) for f in
      ("gpu", "runtime", "ops", "gpu_annotations", "memory", "modules"))}))
"""


def _run(cmd: list[str], env: dict[str, str]) -> dict:
    """Wall s, the tree's peak bytes and stdout of one process."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t_start = time.time()
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env={**os.environ, **env})
        status, usage, tree = wait_sampling(proc.pid)
        wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"{' '.join(cmd[:4])}... failed: {err.read().decode()[-1500:]}")
        own = usage.ru_maxrss * 1024
        return {"wall_s": wall, "peak": max(own, tree or 0), "out": out.read(), "t_start": t_start,
                "cpu_s": usage.ru_utime + usage.ru_stime}


def contenders(trace: Path, plain: Path | None) -> dict[str, tuple[list[str], dict[str, str]]]:
    py = sys.executable
    analyze = [py, "-m", "phaseprof.cli", "analyze", "--format", "json", str(trace)]
    c = {"native": (analyze, {}), "pure-Python": (analyze, {"PHASEPROF_NATIVE": "0"}),
         "loader native": ([py, "-c", _LOADER_CHILD, str(trace)], {}),
         "loader pure-Python": ([py, "-c", _LOADER_CHILD, str(trace)], {"PHASEPROF_NATIVE": "0"}),
         "startup": ([py, "-c", _STARTUP_CHILD, str(trace)], {})}
    if plain is not None:
        c["orjson"] = ([py, str(ROOT / "benchmarks" / "bench_analyze.py"), "--child", "orjson", "--trace",
                        str(plain)], {})
    return c


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trace", type=Path)
    p.add_argument("--repeat", type=int, default=3, help="interleaved rounds; the best wall counts")
    p.add_argument("--no-orjson", action="store_true", help="leave orjson out (it needs ~9x the size in RAM)")
    p.add_argument("--no-pure", action="store_true", help="leave the pure-Python contenders out")
    a = p.parse_args(argv)
    from phaseprof.trace import native

    if not native.available():
        raise SystemExit("the native scanner is not built: python -m phaseprof.trace.native")
    size = gzip_size(a.trace)
    print(f"trace: {a.trace} ({a.trace.stat().st_size / 1e6:,.1f} MB stored, {size / 1e6:,.1f} MB decompressed)")
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}; load average before: {'/'.join(f'{x:.1f}' for x in os.getloadavg())}; "
          f"best of {a.repeat} interleaved round(s)")
    with tempfile.TemporaryDirectory(prefix="bench-loader-") as tmp:
        plain = None
        if not a.no_orjson:
            import gzip

            plain = Path(tmp) / "trace.json"
            with gzip.open(a.trace) as src, plain.open("wb") as dst:
                while block := src.read(1 << 24):
                    dst.write(block)
        runs: dict[str, list[dict]] = {}
        todo = contenders(a.trace, plain)
        if a.no_pure:
            todo = {k: v for k, v in todo.items() if "pure" not in k}
        for _ in range(a.repeat):
            for name, (cmd, env) in todo.items():
                runs.setdefault(name, []).append(_run(cmd, env))
    print(f"load average after: {'/'.join(f'{x:.1f}' for x in os.getloadavg())}")
    best = {k: min(v, key=lambda r: r["wall_s"]) for k, v in runs.items()}
    for k, rs in runs.items():
        best[k]["peak"] = max(r["peak"] for r in rs)
    if "pure-Python" in best:
        same = all(r["out"] == runs["native"][0]["out"] for k in ("native", "pure-Python") for r in runs[k])
        print(f"analyze JSON identical, native and pure-Python, every round: {same}")
    startup = min(float(r["out"].decode().strip()) - r["t_start"] for r in runs["startup"])
    ref = best["native"]["wall_s"]
    print(f"\n{'contender':<22}{'wall s (rounds)':>26}{'CPU s':>8}{'peak MB':>9}{'x native':>10}{'peak/size':>11}"
          f"{'MB/s':>8}")
    for k, r in best.items():
        if k == "startup":
            continue
        walls = ", ".join(f"{x['wall_s']:.2f}" for x in runs[k])
        print(f"{k:<22}{walls:>26}{r['cpu_s']:>8.2f}{r['peak'] / 1e6:>9.0f}{r['wall_s'] / ref:>10.2f}"
              f"{r['peak'] / size:>11.2f}{size / 1e6 / r['wall_s']:>8.0f}")
    for k in ("loader native", "loader pure-Python"):
        if k in best:
            d = json.loads(best[k]["out"])
            print(f"{k}: imports {d['import_s']:.2f} s, load_tables {d['load_s']:.2f} s "
                  f"({size / 1e6 / d['load_s']:,.0f} MB/s inside the process), {d['rows']:,} rows")
    print(f"startup (process start to the first read of the trace): best {startup:.3f} s")
    print("\ntargets (issue 28):")
    if "orjson" in best:
        ratio = ref / best["orjson"]["wall_s"]
        print(f"  [{'PASS' if ratio <= VS_ORJSON else 'MISS'}] whole process <= {VS_ORJSON}x orjson.loads': "
              f"{ratio:.2f}x ({ref:.2f} s vs {best['orjson']['wall_s']:.2f} s)")
    if "pure-Python" in best:
        print(f"  [info] native vs pure-Python whole process: {ref / best['pure-Python']['wall_s']:.2f}x")
    peak = best["native"]["peak"] / size
    print(f"  [{'PASS' if peak <= MEMORY_FACTOR else 'MISS'}] peak <= {MEMORY_FACTOR}x decompressed: {peak:.2f}x")
    print(f"  [{'PASS' if startup <= STARTUP_S else 'MISS'}] startup <= {STARTUP_S} s: {startup:.3f} s")
    mbs = size / 1e6 / ref
    print(f"  [{'PASS' if mbs >= MB_PER_S else 'MISS'}] >= {MB_PER_S:.0f} MB/s end to end: {mbs:.0f} MB/s "
          f"(meaningful on a multi-GB input)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
