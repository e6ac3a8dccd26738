"""Many step markers: ``phaseprof analyze`` on a trace of S steps vs a trace of the same size with 100 steps.

A trace with 200k step markers (88 MB) ran for minutes, ~0.65 ms per step; step count must
not dominate. Both traces are built from real events of a committed vLLM trace
(``traces/graph-pair/tracelens_vllm_decode_full_replay.json.gz``): its ``execute_context_...`` step marker, one
launch call and the kernel it launched, repeated S times shifted in time (new correlation ids; only digits
change). The reference keeps the same events but only 100 of the markers; the others take the name and category of the
source's first CPU op, so both files hold the same events and nearly the same bytes. Each trace is analysed in
a fresh process (``-f json`` to /dev/null); the report is the wall-time ratio many-steps / 100-steps, in the
same run, so it holds on any machine (issue target: at most 2).

    python benchmarks/bench_steps.py                 # 200,000 steps (the issue's count; ~360 MB each)
    python benchmarks/bench_steps.py --steps 20000   # quicker
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "traces/graph-pair/tracelens_vllm_decode_full_replay.json.gz"


def _real_events() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The source's first step marker, a launch call and its kernel, a CPU op, the whole document."""
    with gzip.open(SOURCE, "rb") as f:
        doc = json.load(f)
    ev = doc["traceEvents"]
    marker = next(e for e in ev if str(e.get("name", "")).startswith("execute_") and e.get("ph") == "X")
    kernels = {e["args"]["correlation"]: e for e in ev if e.get("cat") == "kernel" and "args" in e}
    launch = next(e for e in ev if e.get("cat") == "cuda_runtime" and e.get("args", {}).get("correlation") in kernels)
    other = next(e for e in ev if e.get("cat") == "cpu_op" and e.get("ph") == "X")
    return marker, launch, kernels[launch["args"]["correlation"]], other, doc


def build(steps: int, markers: int, dest: Path) -> Path:
    """A trace of ``steps`` repetitions of the real (marker, launch, kernel) triple, ``markers`` of them kept as
    step markers (evenly spaced), the rest named and categorised as the source's first CPU op."""
    marker, launch, kernel, other, doc = _real_events()
    period = marker["dur"] + 10.0
    every = max(steps // markers, 1)
    out = [e for e in doc["traceEvents"] if e.get("ph") == "M"]  # process/thread names
    for i in range(steps):
        t = marker["ts"] + i * period
        keep = i % every == 0 and i // every < markers
        m = dict(marker, ts=t) if keep else dict(marker, ts=t, name=other["name"], cat=other["cat"])
        if keep and every > 1:
            m["dur"] = period * every - 10.0  # the step spans the repetitions it stands for
        corr = 1_000_000 + i
        la = dict(launch, ts=t + 1.0, args=dict(launch["args"], correlation=corr))
        k = dict(kernel, ts=t + 2.0 + la["dur"], args=dict(kernel["args"], correlation=corr))
        out += [m, la, k]
    meta = {k: v for k, v in doc.items() if k != "traceEvents"}
    dest.write_text(json.dumps({**meta, "traceEvents": out}))
    return dest


def run(trace: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "phaseprof.commands.main", "analyze", str(trace), "-f", "json"], check=True,
                   stdout=subprocess.DEVNULL, cwd=ROOT)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=200_000)
    ap.add_argument("--reference-steps", type=int, default=100)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        many = build(args.steps, args.steps, Path(tmp) / "many.json")
        few = build(args.steps, args.reference_steps, Path(tmp) / "few.json")
        sizes = many.stat().st_size / 1e6, few.stat().st_size / 1e6
        t_few, t_many = run(few), run(many)
    print(f"{args.steps:,} steps ({sizes[0]:,.0f} MB): {t_many:.2f} s; {args.reference_steps} steps "
          f"({sizes[1]:,.0f} MB, same events): {t_few:.2f} s; ratio {t_many / t_few:.2f} (target <= 2)")


if __name__ == "__main__":
    main()
