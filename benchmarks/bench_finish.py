#!/usr/bin/env python
"""The step between the native scan and the analysis: ``NativeTableBuilder.finish``, the scanner's
columns to the tables, against a baseline tree in the same rounds.

Each round runs, per tree, a fresh process that scans TRACE in one process (no split read, no read-ahead), then
times the finish alone: CPU seconds of the calling thread (user + system: page faults of new columns count) and
the process's peak RSS during the finish (``VmHWM`` reset before it) next to its RSS at the scan's end. Rounds
interleave the trees; the best CPU of the rounds counts. The tables of both trees are fingerprinted (dtypes,
strides, read-only flags, categories, the bytes of every column) and must be identical.

Usage::

    git archive main phaseprof native | tar -x -C /tmp/base
    (cd /tmp/base/native && cargo build --release --offline)
    cp /tmp/base/native/target/release/libphaseprof_scan.so /tmp/base/phaseprof/trace/_phaseprof_scan.abi3.so
    # (a commit from before the wheel built the scanner: cd /tmp/base && python -m phaseprof.trace.native)
    python benchmarks/bench_finish.py /tmp/phaseprof-bench/trace-x55.json.gz --baseline-src /tmp/base --repeat 2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_CHILD = r"""
import hashlib, json, sys, time
src, path = sys.argv[1], sys.argv[2]
sys.path.insert(0, src)
import numpy as np
import pandas as pd
from phaseprof.trace import native, tables
from phaseprof.trace.stream import stream_trace
def status():
    d = {}
    for line in open("/proc/self/status"):
        if line.startswith(("VmRSS", "VmHWM")):
            k, v = line.split(":"); d[k] = int(v.split()[0]) / 1024
    return d
with tables.gc_paused():
    b = native.NativeTableBuilder()
    s = stream_trace(path, b.add, chunks=b.add_json)
    scanned = status()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    t0 = time.thread_time()
    t = b.finish(s.doc, path=path, sha256=s.sha256, decompressed_bytes=s.decompressed_bytes)
    cpu = time.thread_time() - t0
    after = status()
fp = hashlib.sha256()
frames = ("gpu", "runtime", "ops", "gpu_annotations", "memory", "modules")
for fam in frames:
    for c, col in getattr(t, fam).items():
        if isinstance(col.dtype, pd.CategoricalDtype):
            codes = col.array.codes
            cats = list(col.cat.categories)
            fp.update(repr((fam, c, str(col.dtype.categories.dtype), cats, str(codes.dtype))).encode())
            fp.update(np.ascontiguousarray(codes).tobytes())
        else:
            a = col.to_numpy()
            fp.update(repr((fam, c, str(a.dtype), a.strides, a.flags.writeable)).encode())
            fp.update(np.ascontiguousarray(a).tobytes())
print(json.dumps({"cpu": cpu, "rss_scan": scanned["VmRSS"], "peak_finish": after["VmHWM"],
                  "rows": sum(len(getattr(t, f)) for f in frames),
                  "tables": fp.hexdigest()}))
"""


def run(src: Path, trace: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": ""}
    out = subprocess.run([sys.executable, "-c", _CHILD, str(src), str(trace)], capture_output=True, text=True,
                         env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--baseline-src", type=Path, required=True, help="a tree to compare with, its scanner built")
    ap.add_argument("--repeat", type=int, default=2, help="interleaved rounds; the best CPU counts")
    args = ap.parse_args()
    trees = {"this tree": ROOT, "baseline": args.baseline_src.resolve()}
    results: dict[str, list[dict]] = {k: [] for k in trees}
    for _ in range(args.repeat):
        for name, src in trees.items():
            results[name].append(run(src, args.trace))
    best = {k: min(v, key=lambda r: r["cpu"]) for k, v in results.items()}
    same = len({r["tables"] for v in results.values() for r in v}) == 1
    print(f"trace: {args.trace} ({best['baseline']['rows']:,} rows); load average {os.getloadavg()[0]:.1f}")
    print(f"tables identical, both trees, every round: {same}")
    print(f"{'tree':12s} {'finish CPU s (rounds)':>28s} {'RSS at scan end MiB':>20s} {'peak in finish MiB':>19s}")
    for name, rs in results.items():
        cpus = ", ".join(f"{r['cpu']:.2f}" for r in rs)
        print(f"{name:12s} {cpus:>28s} {best[name]['rss_scan']:20.0f} {best[name]['peak_finish']:19.0f}")
    print(f"finish CPU, this tree / baseline: {best['this tree']['cpu'] / best['baseline']['cpu']:.2f}x")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
