"""The small version of benchmarks/bench_analyze.py (a committed real H200 trace, one round, no HTA, with a
``--steps`` contender): the code path stays tested. No timing is asserted; the children must all succeed."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from ..conftest import REPO

TRACE = next((REPO / "traces" / "h200" / "eager").glob("*decode*/trace.json.gz"))


def test_bench_analyze_small() -> None:
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_analyze.py"), "--trace", str(TRACE),
                           "--skip-hta", "--steps", "1:3"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    assert "failed" not in out and "Error" not in out, out
    assert "x orjson.loads' (decompressed bytes): " in out and "peak memory <= 1.0x decompressed size" in out
    assert "phaseprof --steps 1:3 inside its process:" in out and "s; 2 steps," in out  # steps 1 and 2 only
    assert "gzip inflater: " in out
    assert "the same, pyarrow imported" in out  # the program's setting and a library user's, side by side


def test_bench_memory_small() -> None:
    """benchmarks/bench_memory.py on a committed real trace, every configuration once, the split read forced so
    its forked reader is measured too: the JSON must be the same everywhere."""
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_memory.py"), str(TRACE), "--repeat", "1"],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "PHASEPROF_SPLIT_READ": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [line for line in proc.stdout.splitlines() if line.startswith("trace.json.gz")]
    assert [r.split()[3] + " " + r.split()[4] for r in rows] == ["split lean", "split pyarrow", "one-process lean",
                                                                 "one-process pyarrow"], proc.stdout
    assert "JSON the same in every configuration: True" in proc.stdout


def test_bench_loader_small() -> None:
    """benchmarks/bench_loader.py on a committed real trace, one round of every contender, this tree as its own
    baseline (``--baseline-src``): the analysis JSON must be identical native, baseline and pure-Python."""
    small = REPO / "traces" / "graph-pair" / "tracelens_vllm_decode_full_replay.json.gz"  # the floor: a smaller trace
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_loader.py"), str(TRACE), "--repeat", "1",
                           "--baseline-src", str(REPO), "--floor-trace", str(small)],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    assert "analyze JSON identical, native, baseline and pure-Python, every round: True" in out, out
    assert "readers (tool.reader): native contender native, pure-Python contender python" in out, out
    for contender in ("native", "pure-Python", "loader native", "loader baseline", "baseline", "orjson"):
        assert any(line.startswith(contender + " ") for line in out.splitlines()), (contender, out)
    assert "(startup)" in out and "(startup baseline)" in out and "whole process <= 0.35x orjson.loads'" in out
    assert re.search(r"MB/s end to end: \d+ MB/s \(best of 1; median \d+ MB/s;", out), out
    # the floor's line: its peak, then what this (larger) trace adds above it, per byte of JSON beyond the floor's
    assert re.search(r"floor: \d+ MB peak on a \d+\.\d MB trace; this trace adds -?\d+ MB for \d+\.\d MB more "
                     r"\(-?\d+\.\d\d B/B\)", out), out
