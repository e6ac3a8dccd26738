#!/usr/bin/env python
"""Whole-process time and peak memory of ``phaseprof analyze`` against two baselines, on one real trace.

Each contender runs in a fresh Python subprocess, so imports and interpreter start-up count, and its peak
resident memory is that process's own (``VmHWM``, see ``peak_rss_bytes``):

- **phaseprof**: ``analyze_trace(path)`` on the trace file as stored (gzip decompression included), in a process
  set up as the ``phaseprof`` program sets up its own (``phaseprof.lean_process``: without pyarrow); its peak is
  reported for the process alone and, where the split read forked a reader, with the reader's peak added;
- **phaseprof, pyarrow imported**: the same in a process where pandas imports pyarrow (a library user's);
- **orjson**: ``orjson.loads`` of the same bytes already decompressed (a temp ``.json`` written beforehand,
  so decompression is *not* in its time; gzip decompression is timed on its own and reported beside);
- **HTA**: ``TraceAnalysis(trace_dir=...)`` + ``get_gpu_kernel_breakdown(visualize=False)`` on the same file
  (``HTA_DISABLE_NS_ROUNDING=1``, as phaseprof's cross-check runs it). Skipped with a reason when HTA is not
  installed or fails on the trace.

Targets: phaseprof's whole process <= 0.7x the orjson baseline's, >= 5x faster than HTA, peak memory
<= 1.0x the decompressed trace size. ``--steps FIRST:LAST`` adds a contender analysing only those steps
(``phaseprof analyze --steps``). Usage::

    python benchmarks/bench_analyze.py                   # the largest trace in ../shared/traces/public
    python benchmarks/bench_analyze.py --trace T.json.gz --repeat 3   # best of 3 per contender
    python benchmarks/bench_analyze.py --synthesize-mb 150 --repeat 3  # a >= 150 MB trace made of real events
    python benchmarks/bench_analyze.py --synthesize-mb 2100 --synth-source H200_TRACE --skip-hta --steps 100:110

``--synthesize-mb N`` repeats the events of a real trace (``--synth-source``, default the public H100 vLLM trace)
until the decompressed document is at least N MB, each copy shifted in time (after the previous copy's last
event) and in ids (``correlation``, ``External id``, flow ``id``) so launches still pair up. Only digits change:
the header, trailer and Kineto's whitespace layout are the source's. The file goes to /tmp (reused if present),
never into the repository.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from children import wait_sampling  # noqa: E402  (the runner bench_loader.py and bench_memory.py share)

REPO = Path(__file__).resolve().parents[1]
PUBLIC = REPO.parent / "shared" / "traces" / "public"
SYNTH_SOURCE = PUBLIC / "traceMap__1_h100_1000isl_10osl_32con.pt.trace.json.gz"
SYNTH_DIR = Path(tempfile.gettempdir()) / "phaseprof-bench"
SPEEDUP_VS_HTA = 5.0
VS_ORJSON = 0.7  # phaseprof's whole process at most this many times orjson.loads' process
MEMORY_FACTOR = 1.0


@dataclass(frozen=True)
class Run:
    """One contender's best run: whole-process wall seconds, peak RSS bytes, and what the child reported."""

    name: str
    wall_s: float | None
    peak_rss_bytes: int | None
    detail: dict
    problem: str | None = None
    cpu_s: float | None = None  # user + system CPU time of the process: steadier than wall on a busy machine
    tree_peak_bytes: int | None = None  # the process and its children together (see run_child)


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


_EVENTS_OPEN = re.compile(rb'"traceEvents"[ \t\n\r]*:[ \t\n\r]*\[')
_SHIFTED = re.compile(rb'("(ts|correlation|External id|id)"[ \t\n\r]*:[ \t\n\r]*)(\d+)')


def synthesize(source: Path, target_mb: float) -> Path:
    """A gzipped trace of >= ``target_mb`` decompressed MB: ``source``'s events repeated, shifted in time and ids."""
    raw = source.read_bytes()
    data = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    start = _EVENTS_OPEN.search(data).end()
    end = data.rindex(b"]")  # Kineto's trailer (traceName, displayTimeUnit, baseTimeNanoseconds) has no ']'
    json.loads(b"{" + data[end + 1:].lstrip()[1:])  # ... which this checks: the rest must be the trailer
    events = data[start:end].rstrip()
    ts = [int(m[3]) for m in _SHIFTED.finditer(events) if m[2] == b"ts"]
    ids = [int(m[3]) for m in _SHIFTED.finditer(events) if m[2] != b"ts"]
    ts_step = max(ts) - min(ts) + 10_000_000  # 10 s after the last event starts: no overlap between copies
    id_step = max(ids) + 1
    copies = max(1, -(-int(target_mb * 1e6 - (len(data) - len(events))) // len(events)))
    out = SYNTH_DIR / f"{source.name.split('.json')[0]}-x{copies}.json.gz"
    if out.exists():
        return out
    SYNTH_DIR.mkdir(exist_ok=True)

    def shifted(k: int) -> bytes:
        def one(m: re.Match) -> bytes:
            return m[1] + str(int(m[3]) + k * (ts_step if m[2] == b"ts" else id_step)).encode()
        return _SHIFTED.sub(one, events) if k else events

    tmp = out.with_suffix(".tmp")
    with gzip.open(tmp, "wb", compresslevel=6) as f:
        f.write(data[:start])
        for k in range(copies):
            f.write((b"," if k else b"") + shifted(k))
        f.write(data[start + len(events):])  # the whitespace before ']', the ']' and the trailer
    tmp.rename(out)
    return out


# --- children: each prints one JSON line with its own inner timings ---------------------------------------------

def peak_rss_bytes() -> int:
    """This process's own peak resident memory: ``VmHWM`` of its address space. Not ``ru_maxrss``: Linux carries
    that over from the parent across fork+exec, so a child of a parent that once held a big trace reports the
    parent's peak (this benchmark's parent decompresses, and may synthesize, the trace)."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)

def _child_phaseprof(path: str) -> dict:
    """``analyze_trace(path)``, spelt out as the three calls it makes so that each can be timed."""
    t0 = time.perf_counter()
    from phaseprof.analysis.pipeline import analyze, load_rules, load_tables

    t1 = time.perf_counter()
    rss_imports = peak_rss_bytes()
    tables = load_tables(path)
    t2 = time.perf_counter()
    rss_load = peak_rss_bytes()
    bd = analyze(tables, ruleset=load_rules(None)).breakdown
    t3 = time.perf_counter()
    return {"import_s": t1 - t0, "load_s": t2 - t1, "rules+analysis_s": t3 - t2, "steps": len(bd.steps),
            "kernels": bd.totals["kernels"], "rss_after_imports": rss_imports, "rss_after_load": rss_load}


def _child_steps(path: str) -> dict:
    """``analyze(path, steps=...)``: only a window of steps (``--steps``; the spec comes in PHASEPROF_BENCH_STEPS)."""
    t0 = time.perf_counter()
    from phaseprof.analysis.pipeline import analyze
    from phaseprof.analysis.step_range import StepRange

    t1 = time.perf_counter()
    bd = analyze(path, steps=StepRange.parse(os.environ["PHASEPROF_BENCH_STEPS"])).breakdown
    return {"import_s": t1 - t0, "load+analysis_s": time.perf_counter() - t1, "steps": len(bd.steps),
            "kernels": sum(r.kernels for r in bd.steps), "rss_after_imports": 0, "rss_after_load": 0}


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


CHILDREN = {"phaseprof": _child_phaseprof, "pyarrow": _child_phaseprof, "fixed": _child_fixed,
            "orjson": _child_orjson, "hta": _child_hta, "baseline": _child_phaseprof, "steps": _child_steps}
#: Children set up as the ``phaseprof`` program (and its rank workers) set up their process.
LEAN_CHILDREN = ("phaseprof", "fixed", "steps")


def _as_the_program_runs() -> None:
    from phaseprof.lean_process import leave_out_pyarrow

    leave_out_pyarrow()


def children_peak_rss_bytes() -> int:
    """Peak RSS of this process's largest waited-for child (the split read's forked reader), 0 if none."""
    import resource

    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * (1 if sys.platform == "darwin" else 1024)


def run_child(kind: str, path: Path, baseline_src: Path | None = None) -> Run:
    """Run one contender in a fresh interpreter; wall time of the whole process and its own peak RSS."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", kind, "--trace", str(path)]
    env = None
    if kind == "baseline":  # the same child, importing phaseprof from another source tree
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(baseline_src),
                                                                         os.environ.get("PYTHONPATH")]))}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env)
        status, usage, tree_peak = wait_sampling(proc.pid)
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
    own = detail.pop("peak_rss_bytes")
    return Run(kind, wall, own, detail, cpu_s=usage.ru_utime + usage.ru_stime,
               tree_peak_bytes=max(own, tree_peak) if tree_peak is not None else None)


def best_runs(contenders: dict[str, Path], repeat: int, baseline_src: Path | None = None) -> dict[str, Run]:
    """Each contender's fastest of ``repeat`` runs, the runs interleaved (a, b, c, a, b, c, ...) so that a burst of
    load from other work on a shared machine does not fall on one contender only."""
    runs: dict[str, list[Run]] = {k: [] for k in contenders}
    for _ in range(repeat):
        for kind, path in contenders.items():
            runs[kind].append(run_child(kind, path, baseline_src))
    best = {}
    for kind, rs in runs.items():
        ok = [r for r in rs if r.problem is None]
        best[kind] = min(ok, key=lambda r: r.wall_s) if ok else rs[-1]
    return best


#: orjson.loads' peak RSS per decompressed byte (8.0x measured on a 154 MB H200 trace): it is skipped when the
#: machine has less memory available than that.
ORJSON_RSS_FACTOR = 9.0


def _available_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration):
        return None


def inflater() -> str:
    """Which gzip inflater phaseprof's loader uses here (the optional isal package, else zlib)."""
    import importlib.util

    return "isal (ISA-L)" if importlib.util.find_spec("isal") else "zlib"


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def _mb(n: float | None) -> str:
    return "-" if n is None else f"{n / 1e6:,.0f}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trace", type=Path, help="trace file (default: the largest public trace)")
    p.add_argument("--repeat", type=int, default=1, help="runs per contender; the fastest counts")
    p.add_argument("--skip-hta", action="store_true", help="do not run HTA")
    p.add_argument("--synthesize-mb", type=float, metavar="N",
                   help="benchmark a trace of >= N MB made by repeating a real trace's events (written to /tmp)")
    p.add_argument("--synth-source", type=Path, default=SYNTH_SOURCE, help="the trace --synthesize-mb repeats")
    p.add_argument("--baseline-src", type=Path, metavar="DIR",
                   help="also run phaseprof imported from DIR (e.g. `git archive HEAD phaseprof | tar -x -C DIR`) "
                        "in the same interleaved rounds: before/after figures under the same machine load")
    p.add_argument("--steps", metavar="FIRST:LAST", help="also time analysing only these steps (--steps)")
    p.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.steps:
        os.environ["PHASEPROF_BENCH_STEPS"] = a.steps
    if a.child:
        try:
            if a.child in LEAN_CHILDREN:
                _as_the_program_runs()
            detail = CHILDREN[a.child](str(a.trace))
            print(json.dumps({**detail, "peak_rss_bytes": peak_rss_bytes(),
                              "reader_peak_rss_bytes": children_peak_rss_bytes()}))
        except Exception as e:  # noqa: BLE001 - reported as the contender's problem, in one line
            print(json.dumps({"problem": f"{type(e).__name__}: {str(e)[:200]}"}))
        return 0

    if a.synthesize_mb:
        t0 = time.perf_counter()
        trace = synthesize(a.synth_source, a.synthesize_mb)
        print(f"synthetic trace from {a.synth_source.name}: {trace} ({time.perf_counter() - t0:.1f} s)")
    else:
        trace = a.trace or largest_public_trace()
    raw = trace.read_bytes()
    t0 = time.perf_counter()
    data = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    decompress_s = time.perf_counter() - t0
    size = len(data)
    print(f"trace: {trace} ({len(raw) / 1e6:,.1f} MB stored, {size / 1e6:,.1f} MB decompressed; "
          f"gzip.decompress {decompress_s:.2f} s)")
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}; each contender in a fresh process, best of {a.repeat} (interleaved); "
          f"load average (1/5/15 min) before: {_load()}")
    with tempfile.TemporaryDirectory(prefix="bench-json-") as tmp:
        plain = Path(tmp) / "trace.json"
        plain.write_bytes(data)
        del raw, data
        contenders = {"phaseprof": trace, "pyarrow": trace, "fixed": trace, "orjson": plain}
        if (avail := _available_bytes()) is not None and avail < ORJSON_RSS_FACTOR * size:
            del contenders["orjson"]  # it would take the machine's memory (no swap): other work could be killed
            orjson_skipped = (f"skipped: needs ~{ORJSON_RSS_FACTOR * size / 1e9:.0f} GB ({ORJSON_RSS_FACTOR:.0f}x the "
                              f"decompressed size, as measured on smaller traces), {avail / 1e9:.1f} GB available")
        if a.baseline_src:
            contenders["baseline"] = trace
        if a.steps:
            contenders["steps"] = trace
        if not a.skip_hta:
            contenders["hta"] = trace
        runs = best_runs(contenders, a.repeat, a.baseline_src)
    runs.setdefault("hta", Run("hta", None, None, {}, problem="skipped (--skip-hta)"))
    if "orjson" not in runs:
        runs["orjson"] = Run("orjson", None, None, {}, problem=orjson_skipped)
    print(f"load average after: {_load()}")

    pp = runs["phaseprof"]
    if pp.problem:
        print(f"phaseprof failed: {pp.problem}")
        return 1
    print(f"\n{'contender':<38}{'wall s':>8}{'CPU s':>8}{'peak RSS MB':>13}{'x phaseprof wall':>18}"
          f"{'RSS / decompressed':>20}")
    labels = {"phaseprof": "phaseprof analyze_trace (.gz)", "pyarrow": "  the same, pyarrow imported",
              "fixed": "  of which fixed: imports + rules",
              "baseline": f"phaseprof from {a.baseline_src}"[:37], "orjson": "orjson.loads (decompressed bytes)",
              "hta": "HTA TraceAnalysis + kernel breakdown", "steps": f"phaseprof --steps {a.steps}"[:37]}
    for kind, r in runs.items():
        if r.problem:
            print(f"{labels[kind]:<38}  {r.problem}")
            continue
        print(f"{labels[kind]:<38}{r.wall_s:>8.2f}{r.cpu_s:>8.2f}{_mb(r.peak_rss_bytes):>13}"
              f"{r.wall_s / pp.wall_s:>18.2f}{r.peak_rss_bytes / size:>20.2f}")
    print()
    for kind in ("phaseprof", "baseline", "steps"):
        r = runs.get(kind)
        if r is None or r.problem:
            continue
        inner = ", ".join(f"{k[:-2]} {v:.2f}" for k, v in r.detail.items() if k.endswith("_s"))
        print(f"{labels[kind].strip()} inside its process: {inner} s; {r.detail.get('steps')} steps, "
              f"{r.detail.get('kernels'):.0f} kernels" + ("" if kind == "steps" else
              f"; peak RSS after imports {_mb(r.detail['rss_after_imports'])} MB, after loading the tables "
              f"{_mb(r.detail['rss_after_load'])} MB"))
    print(f"gzip inflater: {inflater()}")
    if runs["orjson"].problem is None:
        o = runs["orjson"].detail
        print(f"orjson inside its process: read {o['read_s']:.2f} s, loads {o['loads_s']:.2f} s "
              f"({o['events']:,} events); decompression (not in its time) {decompress_s:.2f} s")

    print("\ntargets:")
    results = []
    o = runs["orjson"]
    if o.problem is None:
        results.append((f"whole process <= {VS_ORJSON}x orjson.loads' (decompressed bytes)",
                        pp.wall_s <= VS_ORJSON * o.wall_s,
                        f"{pp.wall_s / o.wall_s:.2f}x: {pp.wall_s:.2f} s vs {o.wall_s:.2f} s"))
    h = runs["hta"]
    if h.problem is None:
        results.append((f">= {SPEEDUP_VS_HTA:.0f}x faster than HTA", h.wall_s >= SPEEDUP_VS_HTA * pp.wall_s,
                        f"{h.wall_s / pp.wall_s:.1f}x"))
    else:
        print(f"  (HTA not measured: {h.problem})")
    reader = pp.detail.get("reader_peak_rss_bytes", 0)
    tree = pp.tree_peak_bytes if reader and pp.tree_peak_bytes is not None else pp.peak_rss_bytes
    results.append((f"peak memory <= {MEMORY_FACTOR:.1f}x decompressed size", tree <= MEMORY_FACTOR * size,
                    f"{pp.peak_rss_bytes / size:.2f}x" if not reader else
                    f"{tree / size:.2f}x with the forked reader (process + reader's own pages, sampled every "
                    f"{SAMPLE_S * 1e3:.0f} ms; the process alone {pp.peak_rss_bytes / size:.2f}x, the reader's "
                    f"RSS {reader / size:.2f}x incl. pages shared with it)"))
    for what, ok, value in results:
        print(f"  [{'PASS' if ok else 'MISS'}] {what}: {value}")
    fixed = runs["fixed"]
    if fixed.problem is None:
        floor = fixed.peak_rss_bytes
        print(f"memory floor: interpreter + imports + rules alone peak at {_mb(floor)} MB = "
              f"{floor / size:.2f}x this trace; the {MEMORY_FACTOR:.1f}x target cannot hold below "
              f"{_mb(floor / MEMORY_FACTOR)} MB decompressed, whatever the loader does")
    if o.problem is None:
        print(f"CPU time (steadier than wall on a shared machine): phaseprof {pp.cpu_s:.2f} s, "
              f"orjson {o.cpu_s:.2f} s" + (f", HTA {h.cpu_s:.2f} s" if h.problem is None else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
