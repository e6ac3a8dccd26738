"""Captures with MoE routing recorded, all from one engine, eager mode (the routing hook is Python:
CUDA-graph replays do not call it):

    python scripts/gpu/routing_captures.py --out DIR [--model qwen3.5-35b-a3b] [--batch 64]

1. ``capture_phase`` prefill 128 and prefill 4096, decode 128 in / 32 out (c = 1): ordinary run directories
   (clean timing, profiled request, module tree from hooks, ``routing.npz``).
2. a decode batch of ``--batch`` requests (128 in / 32 out each, seeds 0..N-1) under the profiler, first 8 decode
   steps profiled: a run directory with the trace, ``routing.npz``, breakdown.json and a run.json without clean
   timing (``timing`` empty: this run measures routing and kernel time, not TPOT).

On CPU (``--model tiny-moe --batch 4 --long 64``) the same script checks itself in a few minutes.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import tempfile
from dataclasses import replace
from pathlib import Path

from rich.console import Console

from phaseprof.capture.inprocess.profile import profile_request
from phaseprof.capture.inprocess.runner import capture_phase, open_session, write_routing_of
from phaseprof.capture.shared.options import CaptureOptions, EngineOptions, Hierarchy, Mode, Phase
from phaseprof.capture.shared.rundir import analyze_into, make_readable
from phaseprof.capture.shared.trace_file import finalize_trace
from phaseprof.io import atomic_directory
from phaseprof.records import ModelInfo, RequestInfo, RunRecord


def batch_decode(session, *, out: Path, tokens: int, output: int, batch: int, steps: int) -> Path:  # noqa: ANN001
    final = out / f"{dt.datetime.now(dt.timezone.utc):%Y%m%dT%H%M%SZ}-{session.device.slug}-" \
                  f"{session.source.slug}-decode-{tokens}in-{output}out-c{batch}"
    with tempfile.TemporaryDirectory(prefix="phaseprof-raw-") as work, atomic_directory(final) as tmp:
        req = CaptureOptions(phase=Phase.DECODE, prompt_tokens=tokens, output_tokens=output, seed=0,
                             profile_decode_steps=steps, hierarchy=Hierarchy.HOOKS, concurrency=batch)
        profiled = profile_request(session, req, workdir=Path(work))
        trace = finalize_trace(profiled.raw_trace, tmp / "trace.json.gz", corrections=profiled.drive.corrections(),
                               metadata={"model": session.source.name, "phase": "decode", "prompt_tokens": tokens,
                                         "max_tokens": output, "concurrency": batch, "mode": "eager",
                                         "quant": str(session.options.quant)})
        routing = write_routing_of(profiled, tmp)
        _bd, err = analyze_into(tmp / "trace.json.gz", tmp, final_trace=final / "trace.json.gz",
                                model_config=session.source.hf_config, routing=routing)
        rec = RunRecord(
            created_utc=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            command=["scripts/gpu/routing_captures.py"], mode="eager", quant=str(session.options.quant),
            versions=session.versions, device=session.device.to_dict(), model=ModelInfo.of_source(session.source),
            model_config=session.source.hf_config, vllm_startup_facts=session.facts,
            engine={"kwargs": session.plan.kwargs, "env": session.plan.env, "notes": list(session.plan.notes)},
            request=RequestInfo(phase="decode", prompt_tokens=tokens, max_tokens=output, concurrency=batch, seed=0),
            profile={"profiled_steps": profiled.profiled_steps, "hierarchy": "hooks"}, trace=trace.to_dict(),
            breakdown=None if err else "breakdown.json", breakdown_error=err,
            routing=routing or None)
        rec.write(tmp / "run.json")
        make_readable(tmp)
    return final


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--model", default="qwen3.5-35b-a3b")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--long", type=int, default=4096, help="the long prefill's tokens")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--only-batch", action="store_true", help="only step 2 (the decode batch)")
    ap.add_argument("--engine-arg", action="append", default=[], help="KEY=VALUE (JSON value), for vllm.LLM")
    a = ap.parse_args()
    engine_args = {k: json.loads(v) for k, v in (x.split("=", 1) for x in a.engine_arg)}
    console = Console()
    session = open_session(EngineOptions(model=a.model, mode=Mode.EAGER, max_prompt_tokens=max(a.long, 128),
                                         max_output_tokens=32, max_num_seqs=max(a.batch, 2),
                                         engine_args=engine_args), console=console)
    try:
        singles = () if a.only_batch else ((Phase.PREFILL, 128), (Phase.PREFILL, a.long), (Phase.DECODE, 128))
        for phase, tokens in singles:
            opts = CaptureOptions.of(phase, tokens, output_tokens=32, reps=a.reps, warmup=1, out=a.out,
                                     hierarchy=Hierarchy.HOOKS)
            r = capture_phase(session, replace(opts), console=console)
            console.print(f"{r.run_dir}: routing {r.run.get('routing', {}).get('steps')}")
        d = batch_decode(session, out=a.out, tokens=128, output=32, batch=a.batch, steps=8)
        console.print(f"{d}: batch {a.batch}")
    finally:
        session.close()


if __name__ == "__main__":
    main()
