#!/usr/bin/env python
"""Whole-process time and peak memory of ``phaseprof analyze`` against two baselines, on one real trace.

Each contender runs in a fresh Python subprocess, so imports and interpreter start-up count, and its peak
resident memory is that process's own (``os.wait4`` rusage ``ru_maxrss``):

- **phaseprof**: ``analyze_trace(path)`` on the trace file as stored (gzip decompression included);
- **orjson**: ``orjson.loads`` of the same bytes already decompressed (a temp ``.json`` written beforehand,
  so decompression is *not* in its time; gzip decompression is timed on its own and reported beside);
- **HTA**: ``TraceAnalysis(trace_dir=...)`` + ``get_gpu_kernel_breakdown(visualize=False)`` on the same file
  (``HTA_DISABLE_NS_ROUNDING=1``, as phaseprof's cross-check runs it). Skipped with a reason when HTA is not
  installed or fails on the trace.

Targets (issue 2): phaseprof faster than the orjson baseline, >= 5x faster than HTA, peak memory <= 2x the
decompressed trace size. Usage::

    python benchmarks/bench_analyze.py                   # the largest trace in ../shared/traces/public
    python benchmarks/bench_analyze.py --trace T.json.gz --repeat 3   # best of 3 per contender
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PUBLIC = REPO.parent / "shared" / "traces" / "public"
SPEEDUP_VS_HTA = 5.0
MEMORY_FACTOR = 2.0


@dataclass(frozen=True)
class Run:
    """One contender's best run: whole-process wall seconds, peak RSS bytes, and what the child reported."""

    name: str
    wall_s: float | None
    peak_rss_bytes: int | None
    detail: dict
    problem: str | None = None
    cpu_s: float | None = None  # user + system CPU time of the process: steadier than wall on a busy machine


def gzip_size(path: Path) -> int:
    """Decompressed size of a file (the gzip trailer's ISIZE for .gz, exact below 4 GiB)."""
    if path.name.endswith(".gz"):
        with path.open("rb") as f:
            f.seek(-4, os.SEEK_END)
            return int.from_bytes(f.read(4), "little")
    return path.stat().st_size


def largest_public_trace() -> Path:
    files = [p for p in PUBLIC.glob("*.json*")] if PUBLIC.is_dir() else []
    if not files:
        raise SystemExit(f"no public traces at {PUBLIC}: pass --trace PATH")
    return max(files, key=gzip_size)


# --- children: each prints one JSON line with its own inner timings ---------------------------------------------

def _child_phaseprof(path: str) -> dict:
    t0 = time.perf_counter()
    from phaseprof.analysis.pipeline import analyze_trace

    t1 = time.perf_counter()
    bd = analyze_trace(path)
    t2 = time.perf_counter()
    return {"import_s": t1 - t0, "analyze_s": t2 - t1, "steps": len(bd.steps), "kernels": bd.totals["kernels"]}


def _child_fixed(path: str) -> dict:
    """phaseprof's fixed cost: interpreter, imports (numpy, pandas and, when installed, pyarrow) and rules."""
    t0 = time.perf_counter()
    from phaseprof.analysis.pipeline import analyze_trace  # noqa: F401
    from phaseprof.classify.rules import load_rules

    t1 = time.perf_counter()
    load_rules()
    return {"import_s": t1 - t0, "rules_s": time.perf_counter() - t1}


def _child_orjson(path: str) -> dict:
    import orjson

    t0 = time.perf_counter()
    data = Path(path).read_bytes()
    t1 = time.perf_counter()
    doc = orjson.loads(data)
    t2 = time.perf_counter()
    return {"read_s": t1 - t0, "loads_s": t2 - t1, "events": len(doc["traceEvents"])}


def _child_hta(path: str) -> dict:
    os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"
    t0 = time.perf_counter()
    from hta.trace_analysis import TraceAnalysis

    t1 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-hta-") as tmp:
        os.symlink(Path(path).resolve(), Path(tmp) / ("rank-0.json.gz" if path.endswith(".gz") else "rank-0.json"))
        analyzer = TraceAnalysis(trace_dir=tmp)
        t2 = time.perf_counter()
        kernel_types, _ = analyzer.get_gpu_kernel_breakdown(visualize=False)
        t3 = time.perf_counter()
    return {"import_s": t1 - t0, "load_s": t2 - t1, "breakdown_s": t3 - t2, "types": len(kernel_types)}


CHILDREN = {"phaseprof": _child_phaseprof, "fixed": _child_fixed, "orjson": _child_orjson, "hta": _child_hta}


def run_child(kind: str, path: Path) -> Run:
    """Run one contender in a fresh interpreter; wall time of the whole process and its own peak RSS."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", kind, "--trace", str(path)]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own rusage, not all children's maximum
        wall = time.perf_counter() - t0
        proc.returncode = code = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        lines = out.read().decode().strip().splitlines()
        err_lines = err.read().decode().strip().splitlines()
    if code != 0 or not lines:
        return Run(kind, None, None, {}, problem=f"exit {code}: {(err_lines or ['no output'])[-1][:200]}")
    detail = json.loads(lines[-1])
    if "problem" in detail:
        return Run(kind, None, None, {}, problem=detail["problem"])
    return Run(kind, wall, usage.ru_maxrss * 1024, detail, cpu_s=usage.ru_utime + usage.ru_stime)


def best_of(kind: str, path: Path, repeat: int) -> Run:
    runs = [run_child(kind, path) for _ in range(repeat)]
    ok = [r for r in runs if r.problem is None]
    return min(ok, key=lambda r: r.wall_s) if ok else runs[-1]


def _mb(n: float | None) -> str:
    return "-" if n is None else f"{n / 1e6:,.0f}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trace", type=Path, help="trace file (default: the largest public trace)")
    p.add_argument("--repeat", type=int, default=1, help="runs per contender; the fastest counts")
    p.add_argument("--skip-hta", action="store_true", help="do not run HTA")
    p.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        try:
            print(json.dumps(CHILDREN[a.child](str(a.trace))))
        except Exception as e:  # noqa: BLE001 - reported as the contender's problem, in one line
            print(json.dumps({"problem": f"{type(e).__name__}: {str(e)[:200]}"}))
        return 0

    trace = a.trace or largest_public_trace()
    raw = trace.read_bytes()
    t0 = time.perf_counter()
    data = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    decompress_s = time.perf_counter() - t0
    size = len(data)
    print(f"trace: {trace} ({len(raw) / 1e6:,.1f} MB stored, {size / 1e6:,.1f} MB decompressed; "
          f"gzip.decompress {decompress_s:.2f} s)")
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}; each contender in a fresh process, best of {a.repeat}")
    with tempfile.TemporaryDirectory(prefix="bench-json-") as tmp:
        plain = Path(tmp) / "trace.json"
        plain.write_bytes(data)
        del raw, data
        runs = {"phaseprof": best_of("phaseprof", trace, a.repeat), "fixed": best_of("fixed", trace, a.repeat),
                "orjson": best_of("orjson", plain, a.repeat)}
    runs["hta"] = Run("hta", None, None, {}, problem="skipped (--skip-hta)") if a.skip_hta else \
        best_of("hta", trace, a.repeat)

    pp = runs["phaseprof"]
    if pp.problem:
        print(f"phaseprof failed: {pp.problem}")
        return 1
    print(f"\n{'contender':<38}{'wall s':>8}{'CPU s':>8}{'peak RSS MB':>13}{'x phaseprof wall':>18}"
          f"{'RSS / decompressed':>20}")
    labels = {"phaseprof": "phaseprof analyze_trace (.gz)", "fixed": "  of which fixed: imports + rules",
              "orjson": "orjson.loads (decompressed bytes)",
              "hta": "HTA TraceAnalysis + kernel breakdown"}
    for kind, r in runs.items():
        if r.problem:
            print(f"{labels[kind]:<38}  {r.problem}")
            continue
        print(f"{labels[kind]:<38}{r.wall_s:>8.2f}{r.cpu_s:>8.2f}{_mb(r.peak_rss_bytes):>13}"
              f"{r.wall_s / pp.wall_s:>18.2f}{r.peak_rss_bytes / size:>20.2f}")
    inner = ", ".join(f"{k} {v:.2f}" for k, v in pp.detail.items() if k.endswith("_s"))
    print(f"\nphaseprof inside its process: {inner} s; {pp.detail.get('steps')} steps, "
          f"{pp.detail.get('kernels'):.0f} kernels")
    if runs["orjson"].problem is None:
        o = runs["orjson"].detail
        print(f"orjson inside its process: read {o['read_s']:.2f} s, loads {o['loads_s']:.2f} s "
              f"({o['events']:,} events); decompression (not in its time) {decompress_s:.2f} s")

    print("\ntargets:")
    results = []
    o = runs["orjson"]
    if o.problem is None:
        results.append(("faster than orjson.loads of the decompressed bytes", pp.wall_s < o.wall_s,
                        f"{pp.wall_s:.2f} s vs {o.wall_s:.2f} s"))
    h = runs["hta"]
    if h.problem is None:
        results.append((f">= {SPEEDUP_VS_HTA:.0f}x faster than HTA", h.wall_s >= SPEEDUP_VS_HTA * pp.wall_s,
                        f"{h.wall_s / pp.wall_s:.1f}x"))
    else:
        print(f"  (HTA not measured: {h.problem})")
    results.append((f"peak memory <= {MEMORY_FACTOR:.0f}x decompressed size",
                    pp.peak_rss_bytes <= MEMORY_FACTOR * size, f"{pp.peak_rss_bytes / size:.2f}x"))
    for what, ok, value in results:
        print(f"  [{'PASS' if ok else 'MISS'}] {what}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
