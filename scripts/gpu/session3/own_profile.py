"""vLLM's OWN profiler (profiler_config, llm.start_profile/stop_profile) with Python stacks, in-process.

    . ~/phaseprof-payload/env.sh
    python3 scripts/gpu/session3/own_profile.py --mode eager --out DIR
    python3 scripts/gpu/session3/own_profile.py --mode graph --out DIR --capture-trace

One engine (the ``qwen3.5-35b-a3b`` preset, dummy weights, phaseprof's engine plan for the mode), then:
  1. clean timing without any profiler, with phaseprof's own timing code: prefill 4096 (TTFT, 2 warm-ups, 5 reps)
     and decode 4096 + 32 (TPOT, 1 warm-up, 3 reps);
  2. ``llm.start_profile()``, one request of 4096 prompt tokens with ``max_tokens=5`` (1 prefill step + 4 decode
     steps, batch 1) through ``llm.generate``, ``llm.stop_profile()``: vLLM writes the trace itself into
     ``DIR/vllm-profile/`` (``torch_profiler_with_stack=True``, vLLM's defaults otherwise).
With ``--capture-trace`` (graph mode), ``GPUModelRunner.capture_model`` is wrapped in a torch.profiler
(with_stack=True, record_shapes=False) and each ``_warmup_and_capture`` call in a
``record_function("capture_<tokens>_<MODE>[_uniform]")``, and ``cudagraph_num_of_warmups=1`` (vLLM's default is 0):
``DIR/capture-trace.json.gz`` holds the CUDA-graph capture step (one executed warm-up run, then the capture, of
every size), the capture half of a capture/replay pair.
``DIR/result.json`` records engine kwargs, env, versions, resolved compilation config, timings and trace files.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import sys
import time
import traceback
from pathlib import Path
from typing import Any

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

GRAPH_CAPTURE_SIZES = [1, 2, 4, 8, 4224]  # decode sizes + the piecewise graph a 4096-token prompt pads to
PROMPT_TOKENS = 4096
PROFILE_MAX_TOKENS = 5  # 1 prefill step + 4 decode steps
TPOT_OUTPUT_TOKENS = 32


def log(msg: str) -> None:
    print(f"[own_profile {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def install_capture_profiler(path: Path, events: dict[str, Any]) -> None:
    """Wrap vLLM 0.23's GPUModelRunner.capture_model in a torch.profiler; label each size's warm-up + capture."""
    import torch  # noqa: PLC0415
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner  # noqa: PLC0415

    orig_capture = GPUModelRunner.capture_model
    orig_one = GPUModelRunner._warmup_and_capture

    def one(self: Any, desc: Any, cudagraph_runtime_mode: Any, *args: Any, **kwargs: Any) -> Any:
        label = f"capture_{desc.num_tokens}_{cudagraph_runtime_mode.name}{'_uniform' if desc.uniform else ''}"
        events.setdefault("labels", []).append(label)
        with torch.profiler.record_function(label):
            return orig_one(self, desc, cudagraph_runtime_mode, *args, **kwargs)

    def capture(self: Any) -> Any:
        prof = None
        try:
            prof = torch.profiler.profile(
                activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA],
                record_shapes=False, with_stack=True, profile_memory=False)
            prof.start()
        except Exception as e:  # noqa: BLE001 - never let the side trace break the engine
            events["start_error"] = f"{type(e).__name__}: {e}"
            prof = None
        t = time.perf_counter()
        try:
            return orig_capture(self)
        finally:
            events["capture_s"] = round(time.perf_counter() - t, 2)
            if prof is not None:
                try:
                    prof.stop()
                    raw = path.with_suffix("")  # .json
                    prof.export_chrome_trace(str(raw))
                    with open(raw, "rb") as src, gzip.open(path, "wb", compresslevel=6) as dst:
                        shutil.copyfileobj(src, dst)
                    raw.unlink()
                    events["trace_bytes"] = path.stat().st_size
                except Exception as e:  # noqa: BLE001
                    events["stop_error"] = f"{type(e).__name__}: {e}"
            log(f"capture trace: {events}")

    GPUModelRunner.capture_model = capture
    GPUModelRunner._warmup_and_capture = one


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=["eager", "graph"], required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--model", default="qwen3.5-35b-a3b")
    ap.add_argument("--capture-trace", action="store_true", help="graph mode: also trace the CUDA-graph capture")
    ap.add_argument("--tokens", type=int, default=PROMPT_TOKENS)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--engine-arg", action="append", default=[])
    args = ap.parse_args(argv)

    from rich.console import Console  # noqa: PLC0415

    from phaseprof.capture.shared.options import EngineOptions, Mode, Phase, parse_engine_args  # noqa: PLC0415
    from phaseprof.capture.inprocess.runner import open_session  # noqa: PLC0415
    from phaseprof.capture.shared.prompts import random_prompt  # noqa: PLC0415
    from phaseprof.capture.inprocess.timing import time_phase  # noqa: PLC0415

    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    prof_dir = out / "vllm-profile"
    prof_dir.mkdir(exist_ok=True)
    result: dict[str, Any] = {"mode": args.mode, "model": args.model, "argv": sys.argv, "tasks": {}}

    def save() -> None:
        (out / "result.json").write_text(json.dumps(result, indent=2, default=str))

    engine_args = parse_engine_args(args.engine_arg)
    engine_args["profiler_config"] = {"profiler": "torch", "torch_profiler_dir": str(prof_dir),
                                      "torch_profiler_with_stack": True, "torch_profiler_use_gzip": True}
    if args.mode == "graph":
        cc: dict[str, Any] = {"cudagraph_capture_sizes": GRAPH_CAPTURE_SIZES}
        if args.capture_trace:
            # vLLM's default is 0: the capture step would only record launches. One warm-up run per size, right
            # before its capture, puts the same kernels (names, order, stacks) in the capture trace. Capture-time
            # only: replay is unchanged.
            cc["cudagraph_num_of_warmups"] = 1
        engine_args.setdefault("compilation_config", cc)
    capture_events: dict[str, Any] = {}
    if args.capture_trace:
        install_capture_profiler(out / "capture-trace.json.gz", capture_events)
        result["capture_trace"] = capture_events
    opts = EngineOptions(model=args.model, mode=Mode(args.mode), max_prompt_tokens=args.tokens,
                         max_output_tokens=TPOT_OUTPUT_TOKENS, max_num_seqs=2, engine_args=engine_args,
                         verbose=True)
    console = Console(width=120)
    t0 = time.perf_counter()
    sess = open_session(opts, console=console)
    result["startup_s"] = round(time.perf_counter() - t0, 1)
    result["engine_kwargs"] = sess.plan.kwargs
    result["engine_env"] = sess.plan.env
    result["notes"] = list(sess.plan.notes)
    result["versions"] = sess.versions
    result["device"] = sess.device.to_dict()
    result["startup_facts"] = {k: v for k, v in sess.facts.to_dict().items() if k != "raw_lines"}
    cc = getattr(getattr(sess.engine, "vllm_config", None), "compilation_config", None)
    if cc is not None:
        result["compilation_config"] = {k: str(getattr(cc, k, None)) for k in (
            "mode", "cudagraph_mode", "cudagraph_capture_sizes", "max_cudagraph_capture_size", "splitting_ops",
            "compile_sizes", "use_inductor_graph_partition")}
    save()
    log(f"engine up in {result['startup_s']} s; compilation {result.get('compilation_config')}")

    for name, phase, n_out, reps, warm in (("prefill", Phase.PREFILL, 1, args.reps, 2),
                                           ("decode", Phase.DECODE, TPOT_OUTPUT_TOKENS, 3, 1)):
        t = time.perf_counter()
        try:
            timing = time_phase(sess, phase=phase, prompt_tokens=args.tokens, output_tokens=n_out, reps=reps,
                                warmup=warm)
            result["tasks"][f"timing_{name}"] = {"status": "ok", "elapsed_s": round(time.perf_counter() - t, 1),
                                                 **timing.to_dict()}
            log(f"timing {name}: {timing.headline.to_dict()}")
        except Exception as e:  # noqa: BLE001 - the profile below matters more than the timing
            result["tasks"][f"timing_{name}"] = {"status": "failed", "error": f"{type(e).__name__}: {e}"}
            log(traceback.format_exc())
        save()

    from vllm import SamplingParams  # noqa: PLC0415

    prompt = {"prompt_token_ids": random_prompt(args.tokens, vocab_size=sess.vocab_size, seed=1)}
    sp = SamplingParams(max_tokens=PROFILE_MAX_TOKENS, ignore_eos=True, detokenize=False, temperature=0.0)
    before = {p.name for p in prof_dir.iterdir()}
    t = time.perf_counter()
    sess.llm.start_profile()
    t_gen = time.perf_counter()
    outs = sess.llm.generate([prompt], sp, use_tqdm=False)
    gen_s = time.perf_counter() - t_gen
    sess.llm.stop_profile()
    files = {p.name: p.stat().st_size for p in sorted(prof_dir.iterdir()) if p.name not in before}
    result["tasks"]["own_profile"] = {
        "status": "ok", "elapsed_s": round(time.perf_counter() - t, 1), "generate_s": round(gen_s, 3),
        "request": {"prompt_tokens": args.tokens, "max_tokens": PROFILE_MAX_TOKENS, "batch": 1,
                    "generated": len(outs[0].outputs[0].token_ids)},
        "files": files}
    log(f"own profile: generate {gen_s:.3f} s, files {files}")
    save()
    (out / "vllm-log.txt").write_text("\n".join(sess.collector.messages))
    return 0


if __name__ == "__main__":
    sys.exit(main())
