"""Many rank traces: ``phaseprof analyze DIR --jobs 1`` vs ``--jobs N`` vs ``--ray local``, in one run, as ratios.

Rank files are real H200 rank traces (``traces/h200x2/tp2-eager-prefill4096-decode8``, TP2 eager, vLLM 0.23)
grown to ``--mb`` decompressed MB each by repeating their events shifted in time and ids (``bench_analyze.py
--synthesize-mb``: only digits change), then relabelled as ranks 0..R-1 (``distributedInfo`` rank and world size
rewritten; ranks alternate between the two real sources). Each contender runs as a fresh process; wall time and
the peak of the summed RSS of its whole process tree (sampled every 20 ms with psutil) are reported, and the
outputs are checked to be the same JSON.

    python benchmarks/bench_ranks.py                     # 16 ranks x 150 MB (the issue's benchmark)
    python benchmarks/bench_ranks.py --ranks 4 --mb 0    # small: the committed rank files as they are (CI)
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


def run(cmd: list[str], env: dict[str, str] | None = None) -> dict:
    """Wall seconds, peak summed RSS (MB) of the process tree, and stdout (via a file: a pipe would fill up and
    block the child while this loop samples memory)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env={**os.environ, "COLUMNS": "200", **(env or {})})
        root, peak = psutil.Process(proc.pid), 0
        while proc.poll() is None:
            try:
                procs = [root, *root.children(recursive=True)]
                peak = max(peak, sum(p.memory_info().rss for p in procs if p.is_running()))
            except psutil.Error:
                pass
            time.sleep(0.02)
        wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        if proc.returncode:
            raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {err.read().decode()[-2000:]}")
        return {"wall_s": wall, "peak_rss_mb": peak / 1e6, "stdout": out.read()}


def _normalised(doc: bytes) -> dict:
    d = json.loads(doc)
    for r in d["ranks"]:
        r["analysed_on"] = ""  # Ray reports the node's host name too, but keep the comparison about numbers
    return d


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, default=16)
    p.add_argument("--mb", type=float, default=150.0, help="decompressed MB per rank file (0: as committed)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    p.add_argument("--skip-ray", action="store_true")
    p.add_argument("--dir", type=Path, help="where the rank files go (default: a temp dir, reused by --mb/--ranks)")
    a = p.parse_args(argv)
    dest = a.dir or Path(tempfile.gettempdir()) / f"phaseprof-bench-ranks-{a.ranks}x{a.mb:g}"
    files = build_ranks(a.ranks, a.mb, dest)
    load_before = "/".join(f"{x:.1f}" for x in os.getloadavg())
    raw_mb = sum(len(gzip.decompress(f.read_bytes())) for f in files[:1]) / 1e6
    base = [sys.executable, "-m", "phaseprof.cli", "analyze", "--format", "json"]
    # The reference is the sequential analysis: one process, each file read in one process. "jobs 1" as shipped
    # already uses a second core for the read of each big file (trace.tables split read).
    runs = {"jobs 1 serial": run([*base, str(dest), "--jobs", "1"], env={"PHASEPROF_SPLIT_READ": "0"}),
            "jobs 1": run([*base, str(dest), "--jobs", "1"]),
            f"jobs {a.jobs}": run([*base, str(dest), "--jobs", str(a.jobs)])}
    if not a.skip_ray:
        runs["ray local"] = run([*base, "--ray", "local", str(dest / "*.pt.trace.json.gz")])
    docs = {k: _normalised(v["stdout"]) for k, v in runs.items()}
    same = all(d == docs["jobs 1 serial"] for d in docs.values())
    ref = runs["jobs 1 serial"]["wall_s"]
    print(f"{len(files)} rank files, {raw_mb:.1f} MB decompressed each; {os.cpu_count()} cores; outputs identical: "
          f"{same}; load average (1/5/15 min) before {load_before}, after "
          + "/".join(f"{x:.1f}" for x in os.getloadavg()))
    print(f"{'contender':<14} {'wall s':>8} {'speed-up':>9} {'peak RSS MB':>12} {'RSS/file MB':>12}")
    for k, v in runs.items():
        print(f"{k:<14} {v['wall_s']:8.2f} {ref / v['wall_s']:8.2f}x {v['peak_rss_mb']:12.0f} "
              f"{v['peak_rss_mb'] / raw_mb:12.2f}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
