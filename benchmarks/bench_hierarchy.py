"""What does recording the module tree cost? ``--hierarchy off`` vs ``hooks`` vs ``stack``, one engine, one run.

Per phase, rounds interleave four contenders on the same engine and request (the order rotates every round):
``clean`` (no profiler), then a profiled request with each hierarchy. Overhead = median profiled host time /
median clean host time of the same quantity, as run.json's ``profile.overhead_ratio`` (prefill: host TTFT; decode:
mean decode-step host time vs host TPOT); and the same on the CPU time of the thread that steps the engine
(``StepClock``: steady where wall time is not, on cores shared with other jobs). Ratios between contenders come
from the same rounds. The last round's
traces are finalized as a capture would (no size limit) for their size (events, gzipped bytes), and the hooks
and stack traces are compared: same module tree, same work items per module-view bucket, and the share of time
whose work items got the same bucket and layer (``benchmarks/tree_compare.py``).

    python benchmarks/bench_hierarchy.py                                  # tiny-hybrid on the CPU engine
    python benchmarks/bench_hierarchy.py --phases prefill --tokens 512 --reps 9 --json out.json
    python benchmarks/bench_hierarchy.py --threads 1      # steadiest on shared cores: thread CPU holds all work
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from phaseprof.capture.shared.options import (  # noqa: E402
    CaptureOptions,
    EngineOptions,
    Hierarchy,
    Mode,
    Phase,
    parse_engine_args,
)

CONTENDERS = ("clean", "off", "hooks", "stack")
NO_LIMIT = 1 << 40  # finalize without trimming: the sizes are what each hierarchy records


class StepClock:
    """Wraps ``engine.step``: per call, the CPU time of the calling thread (``time.thread_time``): the host work
    the profiler adds (hooks, Python tracer, op records) runs on that thread, and unlike wall time it does not
    grow when other jobs share the cores."""

    def __init__(self, engine: Any) -> None:
        self.engine, self.cpu_s = engine, []
        step = engine.step

        def timed(*a: Any, **k: Any) -> Any:
            t0 = time.thread_time()
            try:
                return step(*a, **k)
            finally:
                self.cpu_s.append(time.thread_time() - t0)

        engine.step = timed

    def take(self, phase: Phase) -> float:
        """The phase's quantity of the request just run: its first step (prefill), or mean of the others."""
        steps, self.cpu_s = self.cpu_s, []
        return steps[0] if phase is Phase.PREFILL else statistics.mean(steps[1:])

    def close(self) -> None:
        del self.engine.step  # back to the class's method


def _clean(session: Any, phase: Phase, tokens: int, output_tokens: int, seed: int) -> float:
    from phaseprof.capture.inprocess.timing import host_tpot_s, host_ttft_s, run_requests  # noqa: PLC0415

    rec = run_requests(session, prompt_tokens=tokens, max_tokens=phase.max_tokens(output_tokens),
                       n=1, seed=seed, prefix="bc")[0].requests[0]
    value = host_ttft_s(rec) if phase is Phase.PREFILL else host_tpot_s(rec)
    assert value is not None
    return value


def run_phase(session: Any, phase: Phase, *, tokens: int, output_tokens: int, reps: int, warmup: int,
              keep: Path, seed: int = 0) -> dict[str, Any]:
    """Interleaved rounds of the four contenders; sizes and tree comparison from the last round's traces."""
    from phaseprof.capture.inprocess.profile import profile_request  # noqa: PLC0415
    from phaseprof.capture.shared.trace_file import finalize_trace  # noqa: PLC0415
    from benchmarks.tree_compare import compare_trees  # noqa: PLC0415

    times: dict[str, list[float]] = {c: [] for c in CONTENDERS}
    cpu: dict[str, list[float]] = {c: [] for c in CONTENDERS}
    sizes: dict[str, dict[str, Any]] = {}
    clock = StepClock(session.engine)
    for r in range(-warmup, reps):  # negative rounds: warm-up, not kept
        order = CONTENDERS[r % 4:] + CONTENDERS[: r % 4]
        for c in order:
            if c == "clean":
                value = _clean(session, phase, tokens, output_tokens, seed)
            else:
                with tempfile.TemporaryDirectory(prefix="phaseprof-bench-h-") as work:
                    req = CaptureOptions(phase=phase, prompt_tokens=tokens, output_tokens=output_tokens, seed=seed,
                                         hierarchy=Hierarchy(c))
                    prof = profile_request(session, req, workdir=Path(work))
                    if r == reps - 1:
                        tf = finalize_trace(prof.raw_trace, keep / f"{phase}-{c}.json.gz",
                                            corrections=prof.drive.corrections(), max_bytes=NO_LIMIT)
                        sizes[c] = {"events": tf.events, "gz_bytes": tf.gz_bytes, "module_calls": prof.module_calls,
                                    "steps": prof.profiled_steps}
                assert prof.host_s is not None
                value = prof.host_s
            thread_s = clock.take(phase)
            if r >= 0:
                times[c].append(value)
                cpu[c].append(thread_s)
    clock.close()
    clean = statistics.median(times["clean"])
    med = {c: statistics.median(v) for c, v in times.items()}
    cpu_med = {c: statistics.median(v) for c, v in cpu.items()}
    cmp = compare_trees(keep / f"{phase}-hooks.json.gz", keep / f"{phase}-stack.json.gz")
    return {
        "phase": str(phase), "tokens": tokens, "output_tokens": output_tokens if phase is Phase.DECODE else 1,
        "reps": reps, "median_ms": {c: round(v * 1e3, 3) for c, v in med.items()},
        "overhead": {c: round(med[c] / clean, 3) for c in CONTENDERS[1:]},
        # per round, contender / clean of the same round, then the median: robust to load that drifts
        "paired_overhead": {c: round(statistics.median(a / b for a, b in zip(times[c], times["clean"])), 3)
                            for c in CONTENDERS[1:]},
        "cpu_median_ms": {c: round(v * 1e3, 3) for c, v in cpu_med.items()},
        "cpu_paired_overhead": {c: round(statistics.median(a / b for a, b in zip(cpu[c], cpu["clean"])), 3)
                                for c in CONTENDERS[1:]},
        "cpu_overhead": {c: round(cpu_med[c] / cpu_med["clean"], 3) for c in CONTENDERS[1:]},
        "ratio_hooks_over_off": round(med["hooks"] / med["off"], 3),
        "ratio_stack_over_off": round(med["stack"] / med["off"], 3),
        "ratio_stack_over_hooks": round(med["stack"] / med["hooks"], 3),
        "cpu_ratio_hooks_over_off": round(cpu_med["hooks"] / cpu_med["off"], 3),
        "cpu_ratio_stack_over_off": round(cpu_med["stack"] / cpu_med["off"], 3),
        "cpu_ratio_stack_over_hooks": round(cpu_med["stack"] / cpu_med["hooks"], 3),
        "sizes": sizes,
        "tree": {"same_tree": cmp.same_tree, "first_difference": cmp.first_difference,
                 "module_calls": len(cmp.a.calls), "classes": len({n for n, _ in cmp.a.calls}),
                 "layers": list(cmp.a.layers), "same_items_per_bucket": cmp.same_items,
                 "agree_time_pct": None if cmp.agree_pct is None else round(cmp.agree_pct, 3),
                 "max_share_diff_pct": round(cmp.max_share_diff_pct, 2)},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny-hybrid")
    ap.add_argument("--phases", default="prefill,decode")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--output-tokens", type=int, default=8, help="decode: tokens generated per request")
    ap.add_argument("--reps", type=int, default=7, help="interleaved rounds per phase")
    ap.add_argument("--warmup", type=int, default=1, help="rounds first, not counted")
    ap.add_argument("--mode", choices=["eager", "graph"], default="eager")
    ap.add_argument("--engine-arg", action="append", default=[])
    ap.add_argument("--keep", type=Path, default=Path("/tmp/phaseprof-bench-hierarchy"),
                    help="where the last round's traces are written")
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    ap.add_argument("--threads", type=int, default=None, help="OMP_NUM_THREADS for the engine (1: the stepping "
                    "thread does all the work, so its CPU time holds every cost and no OpenMP spin-waiting)")
    args = ap.parse_args(argv)
    if args.threads is not None:
        os.environ["OMP_NUM_THREADS"] = str(args.threads)  # before torch is imported

    from phaseprof.capture.inprocess.runner import open_session  # noqa: PLC0415

    console = Console(width=max(Console().width, 100))
    phases = [Phase(p) for p in args.phases.split(",")]
    args.keep.mkdir(parents=True, exist_ok=True)
    session = open_session(EngineOptions(model=args.model, mode=Mode(args.mode), max_prompt_tokens=args.tokens,
                                         max_output_tokens=args.output_tokens,
                                         engine_args=parse_engine_args(args.engine_arg)), console=console)
    try:
        results = [run_phase(session, p, tokens=args.tokens, output_tokens=args.output_tokens, reps=args.reps,
                             warmup=args.warmup, keep=args.keep) for p in phases]
        device, model, versions = session.device, session.source.name, session.versions
        import torch  # noqa: PLC0415

        threads = torch.get_num_threads()
    finally:
        session.close()
    table = Table(title=f"profiler overhead by hierarchy · {model} · {device.name} · {args.mode} · {threads} "
                        "torch threads")
    for col in ("phase", "contender", "host ms", "overhead", "paired", "thread CPU ms", "CPU overhead", "paired",
                "events", "gz KB", "module calls"):
        table.add_column(col, justify="right")
    for res in results:
        for c in CONTENDERS:
            s = res["sizes"].get(c, {})
            table.add_row(res["phase"], c, f"{res['median_ms'][c]:.2f}",
                          "-" if c == "clean" else f"x{res['overhead'][c]:.2f}",
                          "-" if c == "clean" else f"x{res['paired_overhead'][c]:.2f}",
                          f"{res['cpu_median_ms'][c]:.2f}",
                          "-" if c == "clean" else f"x{res['cpu_overhead'][c]:.2f}",
                          "-" if c == "clean" else f"x{res['cpu_paired_overhead'][c]:.2f}", str(s.get("events", "-")),
                          f"{s['gz_bytes'] / 1e3:.0f}" if s else "-", str(s.get("module_calls", "-")))
    console.print(table)
    for res in results:
        t = res["tree"]
        console.print(f"{res['phase']}: host time hooks/off x{res['ratio_hooks_over_off']:.2f}, stack/off "
                      f"x{res['ratio_stack_over_off']:.2f}, stack/hooks x{res['ratio_stack_over_hooks']:.2f}; "
                      f"thread CPU hooks/off x{res['cpu_ratio_hooks_over_off']:.2f}, stack/off "
                      f"x{res['cpu_ratio_stack_over_off']:.2f}, stack/hooks x{res['cpu_ratio_stack_over_hooks']:.2f}; "
                      f"same tree {t['same_tree']} ({t['module_calls']} calls, {t['classes']} modules, layers "
                      f"{t['layers']}), same items per bucket {t['same_items_per_bucket']}, time with the same "
                      f"bucket and layer {t['agree_time_pct']}%, largest bucket-share difference "
                      f"{t['max_share_diff_pct']} points")
    if args.json:
        args.json.write_text(json.dumps({"device": device.to_dict(), "model": model, "versions": versions,
                                         "mode": args.mode, "torch_threads": threads, "results": results},
                                        indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
