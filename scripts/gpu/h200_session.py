"""Everything issue 3 needs from the H200, for one mode, on ONE engine start, inside one ≤10-minute call.

    . ~/phaseprof-payload/env.sh
    python3 scripts/gpu/h200_session.py --mode eager --out "$OUT"       # then --mode graph in a second call
    python3 scripts/gpu/h200_session.py --mode eager --out /tmp/s --model tiny-hybrid --quick   # CPU rehearsal

Tasks, in order of importance, each wrapped so a failure is logged and the next one still runs:
  1. startup facts (vLLM's block size / mamba padding / KV tokens / concurrency log lines)
  2. capture prefill 4096          3. capture decode 128 prompt + 32 outputs (first 16 decode steps profiled)
  4. TTFT timing benchmark at 512 and 4096 vs the host clock around LLM.generate (+ profiler overhead)
  5. prefill sweep 128..8192 (reps 5)     6. decode sweep at concurrency 1,2,4,8,16 (128 + 32)
A deadline (``--budget-s``, default 515 s from start) makes later tasks skip remaining points; a watchdog
ends the process at budget + 25 s. Output (at most 8 files, each ≤ 16 MiB, traces ≤ 5 MB):
  h200-<mode>.log, h200-<mode>-summary.json, h200-<mode>-bundle.tar.gz (run/sweep directories without
  their traces), trace--<run dir>.json.gz per capture. ``scripts/gpu/unpack_session.py`` puts them together.
"""

from __future__ import annotations

import argparse
import faulthandler
import io
import json
import os
import sys
import tarfile
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

SWEEP_LENGTHS = [128, 256, 512, 1024, 1536, 2048, 2112, 2304, 3072, 4096, 4224, 5120, 6144, 7168, 8192]
# Graph mode: 26 of the seed's 71 capture sizes (capturing all costs minutes of the 9-minute call). Every sweep
# length below 2112 is captured exactly; 2304/3072 pad to 3168, 4096 to 4224, 5120 to 5280, ...: the seed's steps.
LIGHT_CAPTURE_SIZES = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 2112,
                       3168, 4224, 5280, 6336, 7392, 8192]
QUICK_LENGTHS = [128, 256, 512]


def _in_progress(rel: Path) -> bool:
    """A path inside a run directory still being written (atomic_directory's hidden temp name)."""
    return any(part.startswith(".") for part in rel.parts)


class Session:
    """Log with timestamps, track task results, rebuild the output bundle after every task."""

    def __init__(self, out: Path, mode: str, budget_s: float) -> None:
        self.t0 = time.monotonic()
        self.deadline = self.t0 + budget_s
        self.out = out
        self.mode = mode
        self.work = Path(os.environ.get("TMPDIR", "/tmp")) / f"phaseprof-h200-{mode}-{os.getpid()}"
        self.work.mkdir(parents=True, exist_ok=True)
        out.mkdir(parents=True, exist_ok=True)
        self.log_path = out / f"h200-{mode}.log"
        self.summary: dict[str, Any] = {"mode": mode, "budget_s": budget_s, "tasks": {}}
        self.lock = threading.Lock()

    def log(self, msg: str) -> None:
        line = f"[{time.strftime('%H:%M:%S')} +{time.monotonic() - self.t0:6.1f}s] {msg}"
        print(line, flush=True)
        with self.lock, open(self.log_path, "a") as f:
            f.write(line + "\n")

    def left_s(self) -> float:
        return self.deadline - time.monotonic()

    def task(self, name: str, fn: Callable[[], Any], *, min_left_s: float = 10.0) -> Any:
        if self.left_s() < min_left_s:
            self.log(f"SKIP {name}: {self.left_s():.0f} s left (< {min_left_s:.0f})")
            self.summary["tasks"][name] = {"status": "skipped", "left_s": round(self.left_s(), 1)}
            self.bundle()
            return None
        self.log(f"START {name}")
        t = time.monotonic()
        try:
            result = fn()
            self.summary["tasks"][name] = {"status": "ok", "elapsed_s": round(time.monotonic() - t, 1),
                                           **(result if isinstance(result, dict) else {})}
            self.log(f"DONE {name} in {time.monotonic() - t:.1f} s")
        except BaseException as e:  # noqa: BLE001 - log and go on with the next task
            if isinstance(e, KeyboardInterrupt):
                raise
            self.summary["tasks"][name] = {"status": "failed", "error": f"{type(e).__name__}: {e}"[:2000],
                                           "elapsed_s": round(time.monotonic() - t, 1)}
            self.log(f"FAILED {name}: {type(e).__name__}: {e}")
            self.log(traceback.format_exc()[-3000:])
            result = None
        self.bundle()
        return result

    def bundle(self) -> None:
        """Write summary, the bundle (everything but traces) and one file per trace into ``out``."""
        with self.lock:
            self.summary["elapsed_s"] = round(time.monotonic() - self.t0, 1)
            (self.out / f"h200-{self.mode}-summary.json").write_text(json.dumps(self.summary, indent=2, default=str))
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w:gz") as tar:
                for p in sorted(self.work.rglob("*")):
                    rel = p.relative_to(self.work)
                    if p.is_file() and not p.name.endswith(".json.gz") and not _in_progress(rel):
                        tar.add(p, arcname=f"h200-{self.mode}/{rel}")
            tmp = self.out / f".h200-{self.mode}-bundle.tar.gz.tmp"
            tmp.write_bytes(buf.getvalue())
            tmp.replace(self.out / f"h200-{self.mode}-bundle.tar.gz")
            for trace in sorted(self.work.rglob("trace.json.gz")):
                rel = trace.parent.relative_to(self.work)
                if _in_progress(rel):
                    continue
                dest = self.out / f"trace--{str(rel).replace('/', '--')}.json.gz"
                if not dest.exists():
                    dest.write_bytes(trace.read_bytes())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="phaseprof H200 session (one mode, one engine)")
    ap.add_argument("--mode", choices=["eager", "graph"], required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--model", default="qwen3.5-35b-a3b")
    ap.add_argument("--budget-s", type=float, default=515.0,
                    help="deadline for starting work, from launch; the watchdog ends the process 25 s later")
    ap.add_argument("--max-num-seqs", type=int, default=16, help="16 so the decode sweep reaches c=16")
    ap.add_argument("--profile-decode-steps", type=int, default=16)
    ap.add_argument("--quick", action="store_true", help="small sizes for a CPU rehearsal")
    ap.add_argument("--capture-sizes", choices=["light", "seed"], default="light",
                    help="graph mode: 26 sizes (light) or the seed's full list of 71")
    ap.add_argument("--engine-arg", action="append", default=[])
    args = ap.parse_args(argv)

    s = Session(args.out, args.mode, args.budget_s)
    watchdog = threading.Timer(args.budget_s + 25.0, _expire, args=(s,))
    watchdog.daemon = True
    watchdog.start()
    s.log(f"phaseprof h200 session: mode={args.mode} model={args.model} budget={args.budget_s:.0f}s "
          f"quick={args.quick}")
    from rich.console import Console  # noqa: PLC0415

    from phaseprof.capture.shared.options import EngineOptions, Mode, parse_engine_args  # noqa: PLC0415
    from phaseprof.capture.inprocess.runner import open_session  # noqa: PLC0415

    console = Console(width=120)
    prefill_n = 512 if args.quick else 4096
    decode_p, decode_n = (32, 8) if args.quick else (128, 32)
    lengths = QUICK_LENGTHS if args.quick else SWEEP_LENGTHS
    engine_args = parse_engine_args(args.engine_arg)
    if args.mode == "graph" and args.capture_sizes == "light":
        engine_args.setdefault("compilation_config", {"cudagraph_capture_sizes": LIGHT_CAPTURE_SIZES})
    # verbose: vLLM's own log goes to stdout too, so the call's output tail shows what the engine was doing.
    opts = EngineOptions(model=args.model, mode=Mode(args.mode), max_prompt_tokens=max(lengths + [prefill_n]),
                         max_output_tokens=decode_n, max_num_seqs=args.max_num_seqs, engine_args=engine_args,
                         verbose=True)
    holder: dict[str, Any] = {}

    def start() -> dict[str, Any]:
        holder["session"] = open_session(opts, console=console)
        sess = holder["session"]
        facts = {"startup_s": sess.startup_s, "facts": sess.facts.to_dict(), "engine_kwargs": sess.plan.kwargs,
                 "engine_env": sess.plan.env, "notes": list(sess.plan.notes), "versions": sess.versions,
                 "device": sess.device.to_dict()}
        (s.work / "startup.json").write_text(json.dumps(facts, indent=2, default=str))
        (s.work / "vllm-log.txt").write_text("\n".join(sess.collector.messages))
        return {"startup_s": round(sess.startup_s, 1), "facts": {k: v for k, v in sess.facts.to_dict().items()
                                                                if k != "raw_lines"}}

    s.task("engine_start", start, min_left_s=0)
    if "session" not in holder:
        s.log("engine did not start; nothing else to do")
        s.bundle()
        return 1
    sess = holder["session"]
    try:
        _run_tasks(s, sess, console, args, prefill_n, decode_p, decode_n, lengths)
    finally:
        (s.work / "vllm-log.txt").write_text("\n".join(sess.collector.messages))
        s.bundle()
        _print_summary(s)
        watchdog.cancel()
    return 0


def _run_tasks(s: Session, sess: Any, console: Any, args: argparse.Namespace, prefill_n: int, decode_p: int,
               decode_n: int, lengths: list[int]) -> None:
    from phaseprof.capture.inprocess.crosscheck import cross_check  # noqa: PLC0415
    from phaseprof.capture.shared.options import CaptureOptions, Phase  # noqa: PLC0415
    from phaseprof.capture.inprocess.runner import capture_phase  # noqa: PLC0415
    from phaseprof.capture.shared.sweep import SweepSpec  # noqa: PLC0415
    from phaseprof.capture.inprocess.sweep_dir import SweepRequest, run_sweep  # noqa: PLC0415

    def cap(phase: Phase, tokens: int, n_out: int, reps: int, warmup: int) -> dict[str, Any]:
        res = capture_phase(sess, CaptureOptions(phase=phase, prompt_tokens=tokens, output_tokens=n_out, reps=reps,
                                                 warmup=warmup, profile_decode_steps=args.profile_decode_steps,
                                                 out=s.work), console=console, argv=sys.argv)
        h = res.timing.headline
        return {"run_dir": res.run_dir.name, "median_ms": round(h.median_ms, 3), "p10_ms": round(h.p10_ms, 3),
                "p90_ms": round(h.p90_ms, 3), "source": res.timing.source, "overhead": res.overhead_ratio,
                "trace_mb": round(res.record.trace.gz_bytes / 1e6, 2), "trace_dropped": list(res.record.trace.dropped),
                "breakdown_error": res.breakdown_error}

    s.task("capture_prefill", lambda: cap(Phase.PREFILL, prefill_n, 1, 5, 2), min_left_s=40)
    s.task("capture_decode", lambda: cap(Phase.DECODE, decode_p, decode_n, 3, 1), min_left_s=40)

    def bench() -> dict[str, Any]:
        res = cross_check(sess, [512] if args.quick else [512, 4096], reps=4 if args.quick else 10, warmup=2)
        doc = [r.to_dict() for r in res]
        (s.work / "timing-benchmark.json").write_text(json.dumps(doc, indent=2))
        return {"results": [{k: d[k] for k in ("prompt_tokens", "ratio", "paired_ratio_median", "min_ratio",
                                               "within_3pct", "profiler_overhead")} for d in doc]}

    s.task("timing_benchmark", bench, min_left_s=40)

    def prefill_sweep() -> dict[str, Any]:
        req = SweepRequest(SweepSpec(phase=Phase.PREFILL, lengths=tuple(lengths), reps=3 if args.quick else 5,
                                     warmup=1, out=s.work), deadline=s.deadline - 45)
        directory, doc = run_sweep(sess, req, console=console, argv=sys.argv)
        return {"dir": directory.name, "points": {p["prompt_tokens"]: round(p["ttft"]["median_ms"], 2)
                                                   for p in doc["points"]}, "skipped": doc["skipped_lengths"]}

    s.task("prefill_sweep", prefill_sweep, min_left_s=30)

    def decode_sweep() -> dict[str, Any]:
        conc = tuple(c for c in (1, 2, 4, 8, 16) if c <= args.max_num_seqs)
        req = SweepRequest(SweepSpec(phase=Phase.DECODE, concurrency=conc, prompt_tokens=decode_p,
                                     output_tokens=decode_n, reps=2 if args.quick else 3, warmup=1, out=s.work),
                           deadline=s.deadline - 15)
        directory, doc = run_sweep(sess, req, console=console, argv=sys.argv)
        return {"dir": directory.name, "points": {p["concurrency"]: {"tpot_ms": round(p["tpot"]["median_ms"], 3),
                                                                     "tok_s": round(p["output_tok_per_s"]["median"], 1)}
                                                   for p in doc["points"]}, "skipped": doc["skipped_concurrency"]}

    s.task("decode_sweep", decode_sweep, min_left_s=20)


def _expire(s: Session) -> None:
    s.log("WATCHDOG: budget exceeded; writing what exists and exiting 124")
    s.summary["watchdog"] = True
    with open(s.log_path, "a") as f:  # where every thread was: what the engine was stuck on
        faulthandler.dump_traceback(file=f, all_threads=True)
    try:
        s.bundle()
    finally:
        os._exit(124)


def _print_summary(s: Session) -> None:
    s.log("SUMMARY " + json.dumps(s.summary["tasks"], default=str)[:6000])
    files = sorted(p.name for p in s.out.iterdir() if not p.name.startswith("."))
    s.log(f"files in out ({len(files)}): {', '.join(files)}")


if __name__ == "__main__":
    sys.exit(main())
