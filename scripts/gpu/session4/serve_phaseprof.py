"""Start `vllm serve` on the materialized preset with vLLM's torch profiler on, then run `phaseprof capture
--server` (and optionally `phaseprof sweep --server`) against it, then stop it (also on failure).

    . ~/phaseprof-payload/env.sh
    python3 scripts/gpu/session4/serve_phaseprof.py --out DIR --gpus 0 --tp 1 --port 8001 [--eager] [--ep]

The serve command is session 3's (`scripts/gpu/session3/serve_and_measure.py`: phaseprof's engine plan for the
preset turned into `vllm serve` flags, profiler dir DIR/traces, with stacks); the client is phaseprof itself:
`phaseprof capture --server URL --trace-dir DIR/traces --phase prefill --tokens 4096` and `--phase decode --tokens
4096 --output-tokens 32`, each writing its run directory under DIR/runs. Output: ``serve.json`` (argv, env,
timings, each phaseprof command with its exit status and wall time), ``server.log``, ``runs/``, ``traces/``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts" / "gpu" / "session3"))

from serve_and_measure import MULTICAST_OFF, SERVER_CAPTURE_SIZES, to_cli  # noqa: E402

PP = [sys.executable, "-c", "import sys; from phaseprof.cli import main; sys.exit(main())"]


def plan(model: str, *, tokens: int, output_tokens: int, eager: bool) -> tuple[dict[str, Any], dict[str, str]]:
    from phaseprof.capture.inprocess.device import DeviceInfo  # noqa: PLC0415
    from phaseprof.capture.inprocess.engine import build_plan, engine_arg_fields  # noqa: PLC0415
    from phaseprof.capture.inprocess.models import resolve_model  # noqa: PLC0415
    from phaseprof.capture.shared.options import EngineOptions, Mode  # noqa: PLC0415

    source = resolve_model(model)
    engine_args = {} if eager else {"compilation_config": {"cudagraph_capture_sizes": SERVER_CAPTURE_SIZES}}
    opts = EngineOptions(model=model, mode=Mode.EAGER if eager else Mode.GRAPH, max_prompt_tokens=tokens,
                         max_output_tokens=output_tokens, max_num_seqs=2, engine_args=engine_args)
    device = DeviceInfo(kind="cuda", name="(plan only)", memory_bytes=None, slug="plan")
    p = build_plan(source, opts, device=device, fields=engine_arg_fields())
    return dict(p.kwargs), dict(p.env)


def wait_healthy(base: str, proc: subprocess.Popen, limit_s: float) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit_s:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode} before it was healthy")
        try:
            with urllib.request.urlopen(base + "/health", timeout=2) as r:
                if r.status == 200:
                    return time.monotonic() - t0
        except OSError:
            pass
        time.sleep(2)
    raise SystemExit(f"server not healthy after {limit_s:.0f} s")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--model", default="qwen3.5-35b-a3b")
    ap.add_argument("--gpus", default="0")
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--ep", action="store_true")
    ap.add_argument("--eager", action="store_true")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--output-tokens", type=int, default=32)
    ap.add_argument("--gpu-mem", type=float, default=None, help="gpu_memory_utilization")
    ap.add_argument("--health-wait-s", type=float, default=480.0)
    ap.add_argument("--sweep", action="store_true", help="also phaseprof sweep --server prefill 512..4096")
    args = ap.parse_args(argv)

    out = args.out.resolve()
    trace_dir, runs = out / "traces", out / "runs"
    for d in (out, trace_dir, runs):
        d.mkdir(parents=True, exist_ok=True)
    kwargs, env_plan = plan(args.model, tokens=args.tokens, output_tokens=args.output_tokens, eager=args.eager)
    kwargs["served_model_name"] = args.model
    kwargs["profiler_config"] = {"profiler": "torch", "torch_profiler_dir": str(trace_dir),
                                 "torch_profiler_with_stack": True, "torch_profiler_use_gzip": True}
    if args.tp > 1:
        kwargs["tensor_parallel_size"] = args.tp
    if args.ep:
        kwargs["enable_expert_parallel"] = True
    if args.gpu_mem is not None:
        kwargs["gpu_memory_utilization"] = args.gpu_mem
    serve_argv = [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", *to_cli(kwargs),
                  "--host", "127.0.0.1", "--port", str(args.port)]
    env = dict(os.environ, **env_plan, **MULTICAST_OFF, CUDA_VISIBLE_DEVICES=args.gpus, PYTHONUNBUFFERED="1")
    env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1"  # a server's engine core runs in its own process
    record: dict[str, Any] = {"serve_argv": serve_argv, "engine_kwargs": kwargs, "tp": args.tp, "ep": args.ep,
                              "eager": args.eager, "env": {k: env[k] for k in sorted(
                                  set(env_plan) | set(MULTICAST_OFF) | {"CUDA_VISIBLE_DEVICES"})}, "commands": []}

    def save() -> None:
        (out / "serve.json").write_text(json.dumps(record, indent=2, default=str))

    save()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    log_f = open(out / "server.log", "wb")  # noqa: SIM115
    t0 = time.monotonic()
    proc = subprocess.Popen(serve_argv, env=env, stdout=log_f, stderr=subprocess.STDOUT, start_new_session=True,
                            cwd=str(out))
    (out / "server.pgid").write_text(str(proc.pid))
    base = f"http://127.0.0.1:{args.port}"
    rc = 1
    try:
        record["healthy_after_s"] = round(wait_healthy(base, proc, args.health_wait_s), 1)
        save()
        common = ["--server", base, "--trace-dir", str(trace_dir), "--out", str(runs), "--tokens",
                  str(args.tokens)]
        cmds = [["capture", "--phase", "prefill", *common],
                ["capture", "--phase", "decode", "--output-tokens", str(args.output_tokens), *common]]
        if args.sweep:
            cmds.append(["sweep", "--server", base, "--phase", "prefill", "--tokens", "512,1024,2048,4096",
                         "--out", str(runs)])
        rc = 0
        for c in cmds:
            t = time.monotonic()
            cp = subprocess.run([*PP, *c], env=dict(os.environ, **MULTICAST_OFF), cwd=str(out))
            record["commands"].append({"argv": c, "rc": cp.returncode, "wall_s": round(time.monotonic() - t, 1)})
            save()
            rc = rc or cp.returncode
    finally:
        record["server_alive_s"] = round(time.monotonic() - t0, 1)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log_f.close()
        save()
    return rc


if __name__ == "__main__":
    sys.exit(main())
