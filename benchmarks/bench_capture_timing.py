"""Does phaseprof's clean TTFT agree with an independent clock?

In one process and on one engine, at each prompt length (default 512 and 4096), reps alternate between
phaseprof's clean TTFT (engine stepped one step at a time, vLLM's request metrics) and the host clock around
``LLM.generate([prompt], max_tokens=1)``. Prints the ratio of medians (target: within 3%) and the profiler
overhead (profiled / unprofiled host TTFT of one request).

    python benchmarks/bench_capture_timing.py                     # CPU: tiny-hybrid; CUDA: qwen3.5-35b-a3b
    python benchmarks/bench_capture_timing.py --model tiny-hybrid --lengths 512,4096 --reps 20 --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from phaseprof.capture.shared.options import EngineOptions, Mode, parse_engine_args, parse_int_list  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="preset / model dir / repo id (default: by device)")
    ap.add_argument("--lengths", default="512,4096")
    ap.add_argument("--reps", type=int, default=10, help="pairs of measurements per length")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--profile-reps", type=int, default=3, help="profiled requests per length (overhead)")
    ap.add_argument("--mode", choices=["eager", "graph"], default="eager")
    ap.add_argument("--engine-arg", action="append", default=[])
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = ap.parse_args(argv)

    from benchmarks.crosscheck import cross_check  # noqa: PLC0415
    from phaseprof.capture.inprocess.runner import open_session  # noqa: PLC0415

    console = Console(width=max(Console().width, 140))
    lengths = parse_int_list(args.lengths)
    session = open_session(EngineOptions(model=args.model, mode=Mode(args.mode), max_prompt_tokens=max(lengths),
                                         engine_args=parse_engine_args(args.engine_arg)), console=console)
    try:
        results = cross_check(session, lengths, reps=args.reps, warmup=args.warmup, profile_reps=args.profile_reps)
        device, model, versions = session.device, session.source.name, session.versions
    finally:
        session.close()
    table = Table(title=f"clean TTFT vs host clock around generate() · {model} · {device.name}")
    for col in ("tokens", "phaseprof TTFT ms (p10-p90)", "generate() ms (p10-p90)", "ratio", "paired", "min",
                "within 3%", "profiler overhead"):
        table.add_column(col, justify="right")
    for r in results:
        a, b = r.phaseprof_ttft, r.generate_host
        table.add_row(str(r.prompt_tokens), f"{a.median_ms:.2f} ({a.p10_ms:.1f}-{a.p90_ms:.1f})",
                      f"{b.median_ms:.2f} ({b.p10_ms:.1f}-{b.p90_ms:.1f})", f"{r.ratio:.3f}",
                      f"{r.paired_ratio_median:.3f}", f"{r.min_ratio:.3f}", "yes" if r.within_target else "NO",
                      "-" if r.profiler_overhead is None else f"x{r.profiler_overhead:.2f}")
    console.print(table)
    if args.json:
        args.json.write_text(json.dumps({"device": device.to_dict(), "model": model, "versions": versions,
                                         "reps": args.reps, "results": [r.to_dict() for r in results]}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
