"""A prefill and a decode `vllm serve` of one model on ONE GPU, joined by vLLM's NixlConnector, with
vLLM's torch profiler configured on both (inactive until /start_profile); kept up until DIR/stop appears (or
--hold-s), then stopped (also on failure). phaseprof's disaggregated capture runs against them from another call:

    . ~/phaseprof-payload/env.sh
    setsid nohup python3 scripts/gpu/pd_servers.py --out /root/keep/pd > /root/keep/pd.out 2>&1 &
    phaseprof capture --server http://127.0.0.1:8201 --trace-dir /root/keep/pd/prefill/traces \\
        --decode-server http://127.0.0.1:8202 --decode-trace-dir /root/keep/pd/decode/traces --tokens 4096 ...

Both engines: phaseprof's engine plan for the preset (dummy weights), eager (no compile: both start in about
two minutes), online FP8 weights (two 35B-A3B engines fit one H200 only so), a fixed KV reservation, and what
vLLM 0.23's NixlConnector needs for a hybrid model: VLLM_SSM_CONV_STATE_LAYOUT=DS (its 3-read conv-state
transfer), the hybrid KV cache manager (vLLM keeps it on: NixlConnector supports it), one NIXL side-channel
port per engine. Output under DIR: serve.json (argv, env, health times), prefill/ and decode/ (server.log,
traces/), copy.json (this GPU's device-to-device copy rate, measured before the servers start).
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

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts" / "gpu"))

from capture_fixtures import MULTICAST_OFF, stop_server, to_cli  # noqa: E402
from capture_fixtures import _wait_healthy as wait_healthy  # noqa: E402


def plan(model: str, *, quant: str, kv_bytes: int, max_len: int) -> tuple[dict[str, Any], dict[str, str]]:
    from phaseprof.capture.inprocess.device import DeviceInfo  # noqa: PLC0415
    from phaseprof.capture.inprocess.engine import build_plan, engine_arg_fields  # noqa: PLC0415
    from phaseprof.capture.inprocess.models import resolve_model  # noqa: PLC0415
    from phaseprof.capture.shared.options import EngineOptions, Mode, Quant  # noqa: PLC0415

    opts = EngineOptions(model=model, mode=Mode.EAGER, quant=Quant(quant), max_prompt_tokens=max_len,
                         max_output_tokens=128, max_num_seqs=16,
                         engine_args={"max_num_batched_tokens": max_len, "kv_cache_memory_bytes": kv_bytes},
                         async_scheduling=None)
    device = DeviceInfo(kind="cuda", name="(plan only)", memory_bytes=None, slug="plan")
    p = build_plan(resolve_model(model), opts, device=device, fields=engine_arg_fields())
    return dict(p.kwargs), dict(p.env)


def copy_rate(nbytes: int = 1 << 30, reps: int = 20) -> dict[str, Any]:
    """Device-to-device copy of ``nbytes`` on this GPU: bytes copied / elapsed (CUDA events), median of reps."""
    import torch  # noqa: PLC0415

    a = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    ms = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        b.copy_(a)
        e.record()
        e.synchronize()
        ms.append(s.elapsed_time(e))
    ms.sort()
    med = ms[len(ms) // 2]
    out = {"bytes": nbytes, "reps": reps, "median_ms": med, "gb_per_s": nbytes / (med / 1e3) / 1e9,
           "device": torch.cuda.get_device_name(), "how": "torch uint8 tensor copy_ on one GPU, CUDA events"}
    del a, b
    torch.cuda.empty_cache()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--model", default="qwen3.5-35b-a3b")
    ap.add_argument("--quant", default="fp8")
    ap.add_argument("--gpu-mem", type=float, default=0.44)
    ap.add_argument("--kv-gib", type=float, default=8.0)
    ap.add_argument("--max-len", type=int, default=16384)
    ap.add_argument("--ports", default="8201,8202")
    ap.add_argument("--hold-s", type=float, default=1500.0)
    ap.add_argument("--stagger-s", type=float, default=25.0)
    ap.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                    help="extra environment of both servers (e.g. UCX_TLS=...), recorded in serve.json")
    args = ap.parse_args(argv)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    record: dict[str, Any] = {"started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}

    def save() -> None:
        (out / "serve.json").write_text(json.dumps(record, indent=2, default=str))

    try:
        record["copy"] = copy_rate()
        (out / "copy.json").write_text(json.dumps(record["copy"], indent=2))
    except Exception as e:  # noqa: BLE001 - the servers matter more than this figure
        record["copy_error"] = repr(e)
    save()
    kwargs, env_plan = plan(args.model, quant=args.quant, kv_bytes=int(args.kv_gib * 2**30), max_len=args.max_len)
    kwargs["served_model_name"] = args.model
    kwargs["gpu_memory_utilization"] = args.gpu_mem
    kwargs["kv_transfer_config"] = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
    procs: dict[str, subprocess.Popen] = {}
    logs = []
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    ports = [int(p) for p in args.ports.split(",")]
    extra = dict(kv.split("=", 1) for kv in args.env)
    try:
        for i, role in enumerate(("prefill", "decode")):
            d = out / role
            (d / "traces").mkdir(parents=True, exist_ok=True)
            kw = dict(kwargs, profiler_config={"profiler": "torch", "torch_profiler_dir": str(d / "traces"),
                                               "torch_profiler_with_stack": False, "torch_profiler_use_gzip": True})
            serve_argv = [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", *to_cli(kw),
                          "--host", "127.0.0.1", "--port", str(ports[i])]
            env = {**os.environ, **env_plan, **MULTICAST_OFF, "PYTHONUNBUFFERED": "1", "VLLM_SERVER_DEV_MODE": "1",
                   # a server's engine core runs in its own process
                   "VLLM_ENABLE_V1_MULTIPROCESSING": "1", "VLLM_USE_DEEP_GEMM": "0",
                   "VLLM_SSM_CONV_STATE_LAYOUT": "DS", "VLLM_NIXL_SIDE_CHANNEL_PORT": str(5601 + i),
                   **extra}
            record[role] = {"argv": serve_argv, "port": ports[i], "env": {k: env[k] for k in sorted(
                {*env_plan, *MULTICAST_OFF, *extra, "VLLM_USE_DEEP_GEMM", "VLLM_SSM_CONV_STATE_LAYOUT",
                 "VLLM_NIXL_SIDE_CHANNEL_PORT", "VLLM_SERVER_DEV_MODE", "VLLM_ENABLE_V1_MULTIPROCESSING"})}}
            save()
            log = open(d / "server.log", "wb")  # noqa: SIM115 - lives as long as the server
            logs.append(log)
            procs[role] = subprocess.Popen(serve_argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                           start_new_session=True, cwd=str(d))
            record[role]["t_start"] = time.time()
            if i == 0:
                time.sleep(args.stagger_s)  # vLLM checks free memory at start: let the first take its share
        for i, role in enumerate(("prefill", "decode")):
            record[role]["healthy_after_s"] = round(
                wait_healthy(f"http://127.0.0.1:{ports[i]}", procs[role], 900) + 0.0, 1)
            record[role]["healthy_utc"] = time.strftime("%H:%M:%S", time.gmtime())
            save()
        print("both healthy", flush=True)
        t0 = time.monotonic()
        while not (out / "stop").exists() and time.monotonic() - t0 < args.hold_s:
            if any(p.poll() is not None for p in procs.values()):
                record["exited"] = {r: p.returncode for r, p in procs.items()}
                break
            time.sleep(1)
    except SystemExit as e:
        record["error"] = str(e)
    finally:
        for p in procs.values():
            stop_server(p)
        for f in logs:
            f.close()
        record["stopped_utc"] = time.strftime("%H:%M:%S", time.gmtime())
        save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
