#!/usr/bin/env python
"""Peak memory of the ``phaseprof analyze`` program against the decompressed trace size (target: <= 1.0x).

For each trace, a fresh ``python -m phaseprof.commands.main analyze --format json TRACE`` process per configuration:
the split read (the default for traces >= 48 MB) or one process (``PHASEPROF_SPLIT_READ=0``), each as the
program runs (``phaseprof.lean_process``: pyarrow left out) and with pyarrow imported (``PHASEPROF_PYARROW=1``,
what the program did before). Interleaved rounds; per configuration the best wall time and the highest peaks:

- **process**: the analysing process's own peak RSS (``ru_maxrss`` from ``wait4``: exact);
- **tree**: its RSS plus its forked reader's own pages (USS), sampled every 20 ms (``children.wait_sampling``):
  pages the fork shares are counted once; at least the process's own peak.

The JSON printed must be the same in every configuration (checked). Usage::

    python benchmarks/bench_memory.py /tmp/phaseprof-bench/trace-x4.json.gz --repeat 3
    python benchmarks/bench_analyze.py --synthesize-mb 300 ...   # makes the synthetic traces (under /tmp)
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_analyze import gzip_size  # noqa: E402
from children import interleaved  # noqa: E402

CONFIGS = {"split lean": {}, "split pyarrow": {"PHASEPROF_PYARROW": "1"},
           "one-process lean": {"PHASEPROF_SPLIT_READ": "0"},
           "one-process pyarrow": {"PHASEPROF_SPLIT_READ": "0", "PHASEPROF_PYARROW": "1"}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("traces", type=Path, nargs="+")
    p.add_argument("--repeat", type=int, default=2, help="interleaved rounds")
    p.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated subset of: " + ", ".join(CONFIGS))
    a = p.parse_args(argv)
    configs = {k: CONFIGS[k] for k in a.configs.split(",")}
    print(f"{os.cpu_count()} CPUs; load average before: {'/'.join(f'{x:.1f}' for x in os.getloadavg())}; "
          f"best wall and highest peaks of {a.repeat} interleaved round(s)")
    print(f"{'trace (decompressed)':<28} {'configuration':<21} {'wall s':>7} {'process MB':>11} {'x':>5} "
          f"{'tree MB':>8} {'x':>5}")
    same = True
    for trace in a.traces:
        size = gzip_size(trace)
        cmd = [sys.executable, "-m", "phaseprof.commands.main", "analyze", "--format", "json", str(trace)]
        runs = interleaved({k: (cmd, env) for k, env in configs.items()}, a.repeat)
        first = next(iter(runs.values()))[0].stdout
        same &= all(r.stdout == first for rs in runs.values() for r in rs)
        label = f"{trace.name[:14]} ({size / 1e6:,.1f} MB)"
        for k, rs in runs.items():
            own, tree = max(r.own_peak_bytes for r in rs), max(r.tree_peak_bytes for r in rs)
            print(f"{label:<28} {k:<21} {min(r.wall_s for r in rs):7.2f} {own / 1e6:11.0f} {own / size:5.2f} "
                  f"{tree / 1e6:8.0f} {tree / size:5.2f}")
    print(f"JSON the same in every configuration: {same}; load average after: "
          f"{'/'.join(f'{x:.1f}' for x in os.getloadavg())}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
