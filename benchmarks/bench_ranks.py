"""Many rank traces: ``phaseprof analyze DIR --jobs 1`` vs ``--jobs N`` vs ``--ray local``, in one run, as ratios.

Rank files are real H200 rank traces (``traces/h200x2/tp2-eager-prefill4096-decode8``, TP2 eager, vLLM 0.23)
grown to ``--mb`` decompressed MB each by repeating their events shifted in time and ids (``bench_analyze.py
--synthesize-mb``: only digits change), then relabelled as ranks 0..R-1 (``distributedInfo`` rank and world size
rewritten; ranks alternate between the two real sources). Each contender runs as a fresh process; wall time, the
peak summed RSS of its process tree and the peak RSS of its largest process (sampled every 20 ms from ``/proc``, see
``run``) are reported, and the outputs are checked to be the same JSON.

    python benchmarks/bench_ranks.py                     # 16 ranks x 150 MB (the issue's benchmark)
    python benchmarks/bench_ranks.py --ranks 4 --mb 0    # small: the committed rank files as they are (CI)
    python benchmarks/bench_ranks.py --jobs 2,4,8,16 --skip-ray   # scaling in cores, on a machine that has them

``--compare-spawn`` adds the largest ``--jobs`` with every worker spawned fresh (before: each imported the
analysis itself; now they fork from a server that imported it once, ``phaseprof/scale/workers.py``).
"efficiency" is the speed-up over the sequential reference divided by the worker count: 1.00 is linear in cores.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_analyze import synthesize  # noqa: E402

SOURCE = ROOT / "traces/h200x2/tp2-eager-prefill4096-decode8"
_DIST = re.compile(rb'("distributedInfo"\s*:\s*\{[^}]*?"rank"\s*:\s*)\d+([^}]*?"world_size"\s*:\s*)\d+')


def build_ranks(ranks: int, mb: float, dest: Path) -> list[Path]:
    sources = sorted(SOURCE.glob("rank*.pt.trace.json.gz"))
    grown = [synthesize(s, mb) if mb > 0 else s for s in sources]
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for r in range(ranks):
        target = dest / f"rank{r}.pt.trace.json.gz"
        if not target.exists():
            data = gzip.decompress(grown[r % len(grown)].read_bytes())
            data, n = _DIST.subn(lambda m: m[1] + str(r).encode() + m[2] + str(ranks).encode(), data, count=1)
            assert n == 1, "no distributedInfo in the source trace"
            tmp = target.with_suffix(".tmp")
            tmp.write_bytes(gzip.compress(data, compresslevel=1))
            tmp.rename(target)
        out.append(target)
    return out


def _rss_hwm(pid: int) -> tuple[int, int] | None:
    """(VmRSS, VmHWM) bytes of ``pid`` from ``/proc/PID/status``; None when it is gone or unreadable. Only these
    counters are read: walking a process's page tables (smaps, PSS) takes its memory-map lock and slowed the
    workers being measured (16 x 156 MB, --jobs 2: 19.5-21.6 s instead of 15.9 s)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            got = {}
            for line in f:
                if line.startswith((b"VmRSS:", b"VmHWM:")):
                    got[line[:5]] = int(line.split()[1]) * 1024
            return got.get(b"VmRSS", 0), got.get(b"VmHWM", 0)
    except (OSError, ValueError):
        return None


def run(cmd: list[str], env: dict[str, str] | None = None) -> dict:
    """Wall seconds, memory and stdout (via a file: a pipe would fill up and block the child while this loop
    samples memory). Memory, sampled every 20 ms: ``tree_mb``, the peak of the summed RSS of the process tree
    (pages a fork shares, e.g. the split read's reader in --jobs 1, counted twice: an upper bound); ``largest_mb``,
    the peak RSS (VmHWM, exact) of the largest single process (a rank worker, or the one process of --jobs 1)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env={**os.environ, "COLUMNS": "200", **(env or {})})
        root, tree, largest = psutil.Process(proc.pid), 0, 0
        while proc.poll() is None:
            try:
                pids = [proc.pid, *(c.pid for c in root.children(recursive=True))]
            except psutil.Error:
                pids = []
            total = 0
            for m in filter(None, map(_rss_hwm, pids)):
                total += m[0]
                largest = max(largest, m[1])
            tree = max(tree, total)
            time.sleep(0.02)
        wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        if proc.returncode:
            raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {err.read().decode()[-2000:]}")
        return {"wall_s": wall, "tree_mb": tree / 1e6, "largest_mb": largest / 1e6, "stdout": out.read()}


def _normalised(doc: bytes) -> dict:
    d = json.loads(doc)
    for r in d["ranks"]:
        r["analysed_on"] = ""  # Ray reports the node's host name too, but keep the comparison about numbers
    return d


def _job_counts(text: str) -> list[int]:
    try:
        counts = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"--jobs: worker counts >= 1, comma-separated, not {text!r}")
    return [n for n in dict.fromkeys(counts) if n != 1]  # jobs 1 is always run (the shipped default)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, default=16)
    p.add_argument("--mb", type=float, default=150.0, help="decompressed MB per rank file (0: as committed)")
    p.add_argument("--jobs", type=_job_counts, default=[os.cpu_count() or 2],
                   help="worker counts to compare, comma-separated (e.g. 2,4,8,16; default: every core)")
    p.add_argument("--skip-ray", action="store_true")
    p.add_argument("--compare-spawn", action="store_true",
                   help="also run the largest --jobs with spawned workers (PHASEPROF_WORKERS=spawn, the earlier way)")
    p.add_argument("--repeat", type=int, default=2, help="interleaved runs per contender; the fastest counts")
    p.add_argument("--dir", type=Path, help="where the rank files go (default: a temp dir, reused by --mb/--ranks)")
    a = p.parse_args(argv)
    dest = a.dir or Path(tempfile.gettempdir()) / f"phaseprof-bench-ranks-{a.ranks}x{a.mb:g}"
    files = build_ranks(a.ranks, a.mb, dest)
    load_before = "/".join(f"{x:.1f}" for x in os.getloadavg())
    raw_mb = sum(len(gzip.decompress(f.read_bytes())) for f in files[:1]) / 1e6
    base = [sys.executable, "-m", "phaseprof.commands.main", "analyze", "--format", "json"]
    # The reference is the sequential analysis: one process, each file read in one process. "jobs 1" as shipped
    # already uses a second core for the read of each big file (trace.split_read).
    contenders = {"jobs 1 serial": ([*base, str(dest), "--jobs", "1"], {"PHASEPROF_SPLIT_READ": "0"}),
                  "jobs 1": ([*base, str(dest), "--jobs", "1"], None)}
    for n in a.jobs:
        contenders[f"jobs {n}"] = ([*base, str(dest), "--jobs", str(n)], None)
    if a.compare_spawn and a.jobs:
        n = max(a.jobs)
        contenders[f"jobs {n} spawn"] = ([*base, str(dest), "--jobs", str(n)], {"PHASEPROF_WORKERS": "spawn"})
    if not a.skip_ray:
        contenders["ray local"] = ([*base, "--ray", "local", str(dest / "*.pt.trace.json.gz")], None)
    # Interleaved rounds (a, b, c, a, b, c): a burst of load from elsewhere on a shared machine then falls on one
    # run of each contender, not on all runs of one; each contender's fastest run counts, memory its largest.
    all_runs: dict[str, list[dict]] = {k: [] for k in contenders}
    for _ in range(a.repeat):
        for k, (cmd, env) in contenders.items():
            all_runs[k].append(run(cmd, env=env))
    runs = {k: {**min(rs, key=lambda r: r["wall_s"]), "tree_mb": max(r["tree_mb"] for r in rs),
                "largest_mb": max(r["largest_mb"] for r in rs), "walls": [r["wall_s"] for r in rs]}
            for k, rs in all_runs.items()}
    reference = _normalised(all_runs["jobs 1 serial"][0]["stdout"])
    same = all(_normalised(r["stdout"]) == reference for rs in all_runs.values() for r in rs)
    ref = runs["jobs 1 serial"]["wall_s"]
    print(f"{len(files)} rank files, {raw_mb:.1f} MB decompressed each; {os.cpu_count()} cores; outputs identical: "
          f"{same}; load average (1/5/15 min) before {load_before}, after "
          + "/".join(f"{x:.1f}" for x in os.getloadavg()))
    print("memory, sampled every 20 ms: tree = peak summed RSS of all its processes; largest = peak RSS of its largest process "
          "(x file: / one file's decompressed size)")
    print(f"best of {a.repeat} interleaved runs each (all runs' wall s in brackets)")
    print(f"{'contender':<14} {'wall s':>7} {'speed-up':>9} {'effic.':>7} {'tree MB':>8} {'x file':>7} "
          f"{'largest MB':>11} {'x file':>7}  runs")
    for k, v in runs.items():
        n = int(k.split()[1]) if k.startswith("jobs ") else None
        eff = f"{ref / v['wall_s'] / n:7.2f}" if n else f"{'':>7}"
        print(f"{k:<14} {v['wall_s']:7.2f} {ref / v['wall_s']:8.2f}x {eff} {v['tree_mb']:8.0f} "
              f"{v['tree_mb'] / raw_mb:7.2f} {v['largest_mb']:11.0f} {v['largest_mb'] / raw_mb:7.2f}  "
              f"[{', '.join(f'{w:.1f}' for w in v['walls'])}]")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
