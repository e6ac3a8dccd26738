#!/usr/bin/env python
"""How a machine scales in cores, beside how ``phaseprof analyze`` scales on it: N independent processes at once.

``bench_ranks.py`` measures ``--jobs N`` on a rank folder; when its efficiency (speed-up / workers) falls short of
1.0 this tells whether the machine or phaseprof is the limit. For N = 1, 2, 4, ... it starts N copies of each
contender at the same moment and reports the wall of the batch and the CPU seconds per process (the children's
user + system time from ``wait4``):

- **python loop**: a pure-Python loop (no memory traffic): what the cores themselves give (hyper-threads, clock);
- **memory copy**: numpy copies of a 256 MB array (memory bandwidth shared by all cores);
- **analyze**: ``phaseprof analyze --format json TRACE`` of one trace (each process its own copy of the file).

Per contender, "slowdown" is the per-process wall at N over the same at 1: 1.00 is linear in cores. A process's
CPU seconds growing with N means the processes contend for something shared (memory bandwidth, caches, a
hyper-thread's sibling), not that they wait.

    python benchmarks/bench_cores.py TRACE.json.gz --counts 1,2,4,8,16
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LOOP = "s = 0\nfor i in range(10_000_000):\n    s += i\n"
COPY = ("import numpy as np\na = np.ones(32 * 2**20)\nb = np.empty_like(a)\n"
        "for _ in range(40):\n    np.copyto(b, a)\n")


def batch(cmds: list[list[str]]) -> tuple[float, float]:
    """Start every command at once; (wall of the batch, mean CPU seconds per process)."""
    t0 = time.perf_counter()
    procs = [subprocess.Popen(c, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for c in cmds]
    cpu = 0.0
    for p in procs:
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        if p.returncode:
            raise SystemExit(f"{' '.join(p.args)}: exit {p.returncode}: {p.stderr.read().decode()[-500:]}")
        cpu += ru.ru_utime + ru.ru_stime
    return time.perf_counter() - t0, cpu / len(cmds)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trace", type=Path)
    p.add_argument("--counts", default=f"1,2,4,{os.cpu_count() or 2}",
                   help="process counts, comma-separated (default 1,2,4,<cores>)")
    a = p.parse_args(argv)
    counts = sorted({int(x) for x in a.counts.split(",") if x.strip()})
    tmp = Path(tempfile.mkdtemp(prefix="phaseprof-bench-cores-"))
    copies = []
    for i in range(max(counts)):  # each process its own file: no shared page-cache pages
        copies.append(tmp / f"t{i}{''.join(a.trace.suffixes)}")
        shutil.copyfile(a.trace, copies[-1])
    py = sys.executable
    contenders = {
        "python loop": lambda i: [py, "-c", LOOP],
        "memory copy": lambda i: [py, "-c", COPY],
        "analyze": lambda i: [py, "-m", "phaseprof.commands.main", "analyze", "--format", "json", str(copies[i])],
    }
    print(f"{os.cpu_count()} cores; trace {a.trace.name}; load average before "
          + "/".join(f"{x:.1f}" for x in os.getloadavg()))
    print(f"{'contender':<12} {'N':>3} {'wall s':>7} {'CPU s/proc':>11} {'slowdown':>9} {'CPU x N=1':>10}")
    try:
        for name, cmd in contenders.items():
            first = None
            for n in counts:
                wall, cpu = batch([cmd(i) for i in range(n)])
                first = first or (wall, cpu)
                print(f"{name:<12} {n:>3} {wall:7.2f} {cpu:11.2f} {wall / first[0]:9.2f} {cpu / first[1]:10.2f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
