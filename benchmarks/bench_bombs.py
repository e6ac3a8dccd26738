#!/usr/bin/env python
"""gzip bombs through ``phaseprof analyze``: time and peak memory until it ends (the bound: 60 s, 1 GB).

Bombs, built in a temp directory (never in the repository), each one gzip member of ~5 GB decompressed:

- **whitespace**: ``{"traceEvents": [`` + 5 GB of spaces + ``]}`` (a ~5 MB file);
- **whitespace-first**: 5 GB of newlines, then a valid document;
- **kernel-events**: one real kernel event (the first of the committed H200 capture) repeated to 5 GB;
- **dropped-events**: one real ``python_function`` event (phaseprof reads none) repeated to 5 GB.

Each runs ``phaseprof analyze BOMB -f json`` in a fresh Python process; the table shows its wall time, its own
peak RSS (``VmHWM``, reported by the child: ``ru_maxrss`` would carry the parent's peak over fork+exec), the
exit code and the first words of its one-line error. Reference in the same run: ``gzip -dc BOMB > /dev/null``
(decompression alone), so the ratio column says what phaseprof costs beyond inflating the bytes it must read.

    python benchmarks/bench_bombs.py            # all four, 5 GB each
    python benchmarks/bench_bombs.py --gb 1     # smaller
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / "traces/h200/graph/20261130T094740Z-h200-qwen3.5-35b-a3b-prefill-4096/trace.json.gz"
CHILD = """
import json, os, sys
from phaseprof.commands.main import main
rc = main(["analyze", sys.argv[1], "-f", "json"])
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM"))
json.dump({"rc": rc, "hwm_kb": hwm}, open(os.environ["BOMB_REPORT"], "w"))
"""


def _write_member(path: Path, head: bytes, unit: bytes, total: int, tail: bytes) -> None:
    """One gzip member: head + unit repeated to ``total`` bytes + tail, compressed as a stream."""
    c = zlib.compressobj(6, zlib.DEFLATED, 31)
    block = unit * max(1, (8 << 20) // len(unit))
    with path.open("wb") as f:
        f.write(c.compress(head))
        done = 0
        while done < total:
            f.write(c.compress(block))
            done += len(block)
        f.write(c.compress(tail))
        f.write(c.flush())


def build(d: Path, gb: float) -> dict[str, Path]:
    total = int(gb * (1 << 30))
    doc = json.loads(gzip.decompress(SOURCE.read_bytes()))
    kernel = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    python = next((e for e in doc["traceEvents"] if e.get("cat") == "python_function"), None)
    dropped = python or next(e for e in doc["traceEvents"] if e.get("cat") == "ac2g")  # an event phaseprof drops
    bombs = {
        "whitespace": (b'{"traceEvents": [', b" ", b"]}"),
        "whitespace-first": (b"", b"\n", json.dumps(doc).encode()),
        "kernel-events": (b'{"traceEvents": [' + json.dumps(kernel).encode(), b"," + json.dumps(kernel).encode(),
                          b"]}"),
        "dropped-events": (b'{"traceEvents": [' + json.dumps(dropped).encode(),
                           b"," + json.dumps(dropped).encode(), b"]}"),
    }
    out = {}
    for name, (head, unit, tail) in bombs.items():
        p = d / f"{name}.json.gz"
        print(f"building {name} ({gb:g} GB) ...", file=sys.stderr, flush=True)
        _write_member(p, head, unit, total, tail)
        out[name] = p
    return out


def run(p: Path) -> tuple[float, float, int, str]:
    report = p.with_suffix(".report.json")
    env = {**os.environ, "BOMB_REPORT": str(report), "PYTHONPATH": str(REPO)}
    t = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", CHILD, str(p)], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    rep = json.loads(report.read_text()) if report.exists() else {"rc": r.returncode, "hwm_kb": 0}
    msg = (r.stderr.strip().splitlines() or ["(no error)"])[-1].split(": ", 2)[-1][:60]
    return wall, rep["hwm_kb"] / 1024, rep["rc"], msg


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gb", type=float, default=5.0, help="decompressed size of each bomb")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="phaseprof-bombs-") as tmp:
        bombs = build(Path(tmp), args.gb)
        print(f"{'bomb':<18}{'file MB':>8}{'gzip -dc s':>11}{'analyze s':>10}{'ratio':>7}{'peak MB':>8}  rc  message")
        for name, p in bombs.items():
            t = time.perf_counter()
            subprocess.run(f"gzip -dc '{p}' > /dev/null", shell=True, check=False)
            ref = time.perf_counter() - t
            wall, peak, rc, msg = run(p)
            print(f"{name:<18}{p.stat().st_size / 1e6:>8.1f}{ref:>11.1f}{wall:>10.1f}{wall / ref:>7.2f}"
                  f"{peak:>8.0f}  {rc:>2}  {msg}", flush=True)


if __name__ == "__main__":
    main()
