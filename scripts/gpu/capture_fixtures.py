"""GPU fixture captures on the lent device machine: the maintained form of what GPU sessions 3 and 4 scripted.

A device call lasts at most 10 minutes, so captures run detached and later calls collect what finished:

    # on the device, detached (the payload assembled first: . ~/phaseprof-payload/env.sh):
    python3 scripts/gpu/capture_fixtures.py run WORK NAME --gpus 0 --limit-s 900 -- phaseprof capture ...
    python3 scripts/gpu/capture_fixtures.py run WORK NAME --gpus 0 -- \\
        python3 scripts/gpu/capture_fixtures.py serve --out '{item}' --tokens 4096 [--tp 2 --ep] [--sweep]
    # in each later device call: what finished, into $OUT (at most 8 files and 60 MiB, most important first)
    python3 scripts/gpu/capture_fixtures.py collect WORK --wait-s 300 [--first NAME ...]
    # here, on the files that came back:
    python3 scripts/gpu/capture_fixtures.py unpack DEST FILES_AT...

- ``run``: one item: ``COMMAND`` (``{item}`` in it is replaced by ``WORK/items/NAME``, its output folder) with
  ``CUDA_VISIBLE_DEVICES=GPUS`` under a time limit; log ``WORK/logs/NAME.log``, exit status ``WORK/items/NAME.rc``.
- ``serve``: ``vllm serve`` with phaseprof's engine plan for the preset (``build_plan``: random weights, no
  tokenizer, prefix caching and async scheduling off, graph mode with a compact CUDA-graph size list unless
  ``--eager``) and vLLM's torch profiler writing into ``OUT/traces``; then ``phaseprof capture --server`` for a
  prefill and a decode request (and ``phaseprof sweep --server`` with ``--sweep``) into ``OUT/runs``; the server
  is stopped also on failure. ``OUT/serve.json`` records the serve command, the environment and each command's
  exit status and wall time; ``OUT/server.log`` is the server's output.
- ``collect``: ``status.tgz`` (every log and exit status) and one ``item--NAME.tar`` per finished item not sent
  before (split into ``.partNN`` of 15 MiB when larger).
- ``unpack``: the items back into ``DEST/NAME/`` (parts joined across calls), the logs into ``DEST/status/``.

NVLink multicast stays off everywhere (``NCCL_NVLS_ENABLE=0`` ...): on shared hosts it can take the GPUs out of
service. The committed traces were cut from such outputs with ``scripts/cut_trace.py``; each ``traces/**/README.md``
says how.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
#: CUDA-graph sizes of a served engine: up to the 4,096-token prefill plus a decode batch.
SERVER_CAPTURE_SIZES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4224]
STORE_TRUE_ONLY = {"disable_log_stats"}  # plain store_true flags: False is the default, never spelled out
PP = [sys.executable, "-c", "import sys; from phaseprof.commands.main import main; sys.exit(main())"]
MAX_FILES, MAX_BYTES, PART_BYTES = 8, 60 * 1024 * 1024, 15 * 1024 * 1024
PART = re.compile(r"^item--(?P<name>[\w.-]+?)\.tar(?:\.part(?P<n>\d+))?$")


# ---- run: one item

def run_item(work: Path, name: str, command: list[str], *, gpus: str, limit_s: float) -> int:
    item = work / "items" / name
    item.mkdir(parents=True, exist_ok=True)
    (work / "logs").mkdir(parents=True, exist_ok=True)
    argv = [a.replace("{item}", str(item)) for a in command]
    env = dict(os.environ, **MULTICAST_OFF, CUDA_VISIBLE_DEVICES=gpus, PYTHONUNBUFFERED="1")
    t0 = time.monotonic()
    with (work / "logs" / f"{name}.log").open("wb") as log:
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:  # SIGTERM first: ``serve`` stops its server on it
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            rc = 124
    (work / "items" / f"{name}.rc").write_text(f"{rc}\n")
    with (work / "logs" / "items.log").open("a") as f:
        f.write(f"{name} rc={rc} {time.monotonic() - t0:.0f}s: {' '.join(argv)}\n")
    return rc


# ---- serve: vllm serve with phaseprof's plan, phaseprof as the client

def engine_plan(model: str, *, tokens: int, output_tokens: int, eager: bool) -> tuple[dict[str, Any], dict[str, str]]:
    """phaseprof's engine kwargs and environment for ``model`` (no CUDA touched)."""
    from phaseprof.capture.inprocess.device import DeviceInfo  # noqa: PLC0415
    from phaseprof.capture.inprocess.engine import build_plan, engine_arg_fields  # noqa: PLC0415
    from phaseprof.capture.inprocess.models import resolve_model  # noqa: PLC0415
    from phaseprof.capture.shared.options import EngineOptions, Mode  # noqa: PLC0415

    engine_args = {} if eager else {"compilation_config": {"cudagraph_capture_sizes": SERVER_CAPTURE_SIZES}}
    opts = EngineOptions(model=model, mode=Mode.EAGER if eager else Mode.GRAPH, max_prompt_tokens=tokens,
                         max_output_tokens=output_tokens, max_num_seqs=2, engine_args=engine_args)
    device = DeviceInfo(kind="cuda", name="(plan only)", memory_bytes=None, slug="plan")
    plan = build_plan(resolve_model(model), opts, device=device, fields=engine_arg_fields())
    return dict(plan.kwargs), dict(plan.env)


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


def stop_server(proc: subprocess.Popen) -> None:
    """Stop a server started in its own process group: SIGINT (vLLM shuts down cleanly), SIGKILL after 40 s."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _wait_healthy(base: str, proc: subprocess.Popen, limit_s: float) -> float:
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


def serve(args: argparse.Namespace) -> int:
    out = args.out.resolve()
    trace_dir, runs = out / "traces", out / "runs"
    for d in (out, trace_dir, runs):
        d.mkdir(parents=True, exist_ok=True)
    kwargs, env_plan = engine_plan(args.model, tokens=args.tokens, output_tokens=args.output_tokens,
                                   eager=args.eager)
    kwargs["served_model_name"] = args.model
    kwargs["profiler_config"] = {"profiler": "torch", "torch_profiler_dir": str(trace_dir),
                                 "torch_profiler_with_stack": args.with_stack, "torch_profiler_use_gzip": True}
    if args.tp > 1:
        kwargs["tensor_parallel_size"] = args.tp
    if args.ep:
        kwargs["enable_expert_parallel"] = True
    if args.gpu_mem is not None:
        kwargs["gpu_memory_utilization"] = args.gpu_mem
    serve_argv = [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", *to_cli(kwargs),
                  "--host", "127.0.0.1", "--port", str(args.port)]
    if args.print_argv:
        print(json.dumps({"serve_argv": serve_argv, "env": env_plan}, indent=2))
        return 0
    env = dict(os.environ, **env_plan, **MULTICAST_OFF, PYTHONUNBUFFERED="1")
    env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1"  # a server's engine core runs in its own process
    record: dict[str, Any] = {"serve_argv": serve_argv, "engine_kwargs": kwargs, "tp": args.tp, "ep": args.ep,
                              "eager": args.eager, "env": {k: env[k] for k in sorted(
                                  {*env_plan, *MULTICAST_OFF} | ({"CUDA_VISIBLE_DEVICES"} & set(env)))},
                              "commands": []}

    def save() -> None:
        (out / "serve.json").write_text(json.dumps(record, indent=2, default=str))

    save()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    base = f"http://127.0.0.1:{args.port}"
    t0 = time.monotonic()
    with (out / "server.log").open("wb") as log_f:
        proc = subprocess.Popen(serve_argv, env=env, stdout=log_f, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=str(out))
        rc = 1
        try:
            record["healthy_after_s"] = round(_wait_healthy(base, proc, args.health_wait_s), 1)
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
            stop_server(proc)
            save()
    return rc


# ---- collect (on the device) and unpack (here)

def collect(work: Path, out: Path, *, wait_s: float, first: list[str]) -> list[Path]:
    """Wait up to ``wait_s`` for running items, then move into ``out`` the logs and what finished since the last
    call: at most ``MAX_FILES`` files and ``MAX_BYTES``, items named in ``first`` first; the rest waits."""
    items = work / "items"
    t0 = time.monotonic()
    while time.monotonic() - t0 < wait_s and any(d.is_dir() and not (items / f"{d.name}.rc").exists()
                                                 for d in items.iterdir()):
        time.sleep(5)
    pack, sent = work / "pack", work / "sent.list"
    pack.mkdir(exist_ok=True)
    done = set(sent.read_text().split()) if sent.exists() else set()
    with tarfile.open(out / "status.tgz", "w:gz") as tar:
        tar.add(work / "logs", arcname="logs")
        for rc in sorted(items.glob("*.rc")):
            tar.add(rc, arcname=f"items/{rc.name}")
    for rc in sorted(items.glob("*.rc")):
        name = rc.stem
        if name in done or not (items / name).is_dir():
            continue
        done.add(name)
        blob = io.BytesIO()
        with tarfile.open(fileobj=blob, mode="w") as tar:
            tar.add(items / name, arcname=name)
        data = blob.getvalue()
        if len(data) <= PART_BYTES:
            (pack / f"item--{name}.tar").write_bytes(data)
        else:
            for i in range(0, len(data), PART_BYTES):
                (pack / f"item--{name}.tar.part{i // PART_BYTES:02d}").write_bytes(data[i:i + PART_BYTES])
    sent.write_text("".join(f"{n}\n" for n in sorted(done)))
    rank = {n: i for i, n in enumerate(first)}
    waiting = sorted(pack.iterdir(), key=lambda p: (rank.get(PART.match(p.name)["name"], len(rank)), p.name))
    moved, files, size = [], 1, (out / "status.tgz").stat().st_size
    for f in waiting:
        n = f.stat().st_size
        if files + 1 > MAX_FILES or size + n > MAX_BYTES:
            print(f"later: {f.name}")
            continue
        moved.append(f.rename(out / f.name))
        files, size = files + 1, size + n
    return moved


def unpack(dest: Path, folders: list[Path]) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    parts: dict[str, list[tuple[int, Path]]] = {}
    for folder in folders:
        for f in sorted(folder.iterdir()):
            if f.name == "status.tgz":  # a later call's copy replaces an earlier one
                with tarfile.open(f) as tar:
                    tar.extractall(dest / "status", filter="data")
                print(f"status <- {f}")
            elif m := PART.match(f.name):
                parts.setdefault(m["name"], []).append((int(m["n"] or 0), f))
    for name, found in sorted(parts.items()):
        blob = b"".join(p.read_bytes() for _, p in sorted(found))
        with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
            tar.extractall(dest, filter="data")
        print(f"{name}: {len(found)} part(s), {len(blob) / 1e6:.1f} MB -> {dest / name}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run one item (COMMAND after --)")
    r.add_argument("work", type=Path)
    r.add_argument("name")
    r.add_argument("--gpus", default="0")
    r.add_argument("--limit-s", type=float, default=1800.0)
    s = sub.add_parser("serve", help="vllm serve with phaseprof's plan, then phaseprof capture --server")
    s.add_argument("--out", type=Path, required=True)
    s.add_argument("--model", default="qwen3.5-35b-a3b")
    s.add_argument("--tp", type=int, default=1)
    s.add_argument("--ep", action="store_true")
    s.add_argument("--eager", action="store_true")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--tokens", type=int, default=4096)
    s.add_argument("--output-tokens", type=int, default=32)
    s.add_argument("--gpu-mem", type=float, default=None, help="gpu_memory_utilization")
    s.add_argument("--no-stack", dest="with_stack", action="store_false", help="torch_profiler_with_stack off")
    s.add_argument("--health-wait-s", type=float, default=480.0)
    s.add_argument("--sweep", action="store_true", help="also phaseprof sweep --server prefill 512..4096")
    s.add_argument("--print-argv", action="store_true", help="print the serve command and exit")
    c = sub.add_parser("collect", help="finished items into $OUT")
    c.add_argument("work", type=Path)
    c.add_argument("--wait-s", type=float, default=0.0)
    c.add_argument("--first", nargs="*", default=[], help="item names to send first")
    u = sub.add_parser("unpack", help="items back together here")
    u.add_argument("dest", type=Path)
    u.add_argument("files_at", type=Path, nargs="+")
    args = list(sys.argv[1:] if argv is None else argv)
    cut = args.index("--") if "--" in args else len(args)
    a, command = ap.parse_args(args[:cut]), args[cut + 1:]
    if a.cmd == "run":
        if not command:
            ap.error("run needs a COMMAND after --")
        return run_item(a.work, a.name, command, gpus=a.gpus, limit_s=a.limit_s)
    if a.cmd == "serve":
        return serve(a)
    if a.cmd == "collect":
        out = Path(os.environ.get("OUT") or ap.error("collect writes into $OUT, which is not set"))
        for f in collect(a.work, out, wait_s=a.wait_s, first=a.first):
            print(f"sent: {f.name}")
        return 0
    unpack(a.dest, a.files_at)
    return 0


if __name__ == "__main__":
    sys.exit(main())
