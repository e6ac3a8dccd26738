"""``capture --server`` against a hostile or broken server: a fake vLLM server in this
process, on 127.0.0.1, with one mode per class. Every answer is untrusted input: the capture ends with exit 0,
or with exit 2/3 and one line on stderr — never a traceback, never a hang, never memory without bound.

Modes write raw bytes (``Raw``): a body that never ends, a byte every few tenths of a second, a stream line with
no newline. Deadlines in these tests are 1 s; a dribbling answer would be complete after a few seconds, so a
capture that waits for it instead of cutting it at the deadline goes on and fails differently."""

from __future__ import annotations

import json
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from rich.console import Console

from phaseprof.capture.server.capture import ServerCapture, ServerTarget, capture_from_server
from phaseprof.capture.server.traces import CLOCK_SLACK_S, ProfileWindow, export_stamp_ns, snapshot, wait_for_traces
from phaseprof.capture.shared.options import CaptureOptions, Phase
from phaseprof.commands.main import main
from phaseprof.errors import PhaseprofError
from tests.capture.test_server_errors import MODEL, REAL_TRACE, vllm_like

#: A route that writes its own bytes (status line included) to the socket: ``write(data)``.
Raw = Callable[[Callable[[bytes], None]], None]


@dataclass
class FakeServer:
    """Routes by (method, path) as in test_server_errors.Stub; a route may also be ``Raw``."""

    routes: dict[tuple[str, str], object] = field(default_factory=dict)
    seen: list[tuple[str, str]] = field(default_factory=list)
    url: str = ""
    stop: threading.Event = field(default_factory=threading.Event)


@contextmanager
def serving() -> Iterator[FakeServer]:
    state = FakeServer()

    class Handler(BaseHTTPRequestHandler):
        def _answer(self, method: str) -> None:
            state.seen.append((method, self.path))
            if length := int(self.headers.get("Content-Length") or 0):
                self.rfile.read(length)
            route = state.routes.get((method, self.path.split("?")[0]), (404, b'{"detail":"Not Found"}'))
            try:
                if isinstance(route, tuple):
                    status, body = route
                    self.send_response(status)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                else:
                    route(self._write)  # type: ignore[operator]
            except OSError:
                pass  # the client hung up (as it should, at its deadline)

        def _write(self, data: bytes) -> None:
            if state.stop.is_set():
                raise BrokenPipeError
            self.wfile.write(data)
            self.wfile.flush()

        def do_GET(self) -> None:  # noqa: N802
            self._answer("GET")

        def do_POST(self) -> None:  # noqa: N802
            self._answer("POST")

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state.stop.set()  # dribbling handlers stop at their next write
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def fake() -> Iterator[FakeServer]:
    with serving() as state:
        yield state


def respond(write: Callable[[bytes], None], status: int = 200, body: bytes = b"") -> None:
    """A whole plain answer, from inside a ``Raw`` route."""
    write(f"HTTP/1.1 {status} X\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)


def dribble(head: bytes, body: bytes, *, every_s: float = 0.25) -> Raw:
    """Status line and headers at once, then the body one byte every ``every_s``: each read gets a byte long
    before any socket timeout, so only a deadline for the whole request ends it."""

    def route(write: Callable[[bytes], None]) -> None:
        write(head)
        for i in range(len(body)):
            time.sleep(every_s)
            write(body[i:i + 1])

    return route


def ok_head(body: bytes, content_type: str = "application/json") -> bytes:
    return (f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n").encode()


def capture(fake: FakeServer, tmp_path: Path, *extra: str) -> int:
    return main(["capture", "--server", fake.url, "--trace-dir", str(tmp_path), "--tokens", "16", "--reps", "1",
                 "--warmup", "0", "--out", str(tmp_path / "runs"), "--trace-wait", "1", *extra])


def one_line(capsys: pytest.CaptureFixture[str]) -> str:
    """stderr, checked to be one line (no traceback)."""
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in err
    return err


# -- class 10: --request-timeout is a deadline for the whole request ------------------------------------------

def test_dribbled_version_is_cut_at_the_deadline(fake: FakeServer, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    body = json.dumps({"version": "0.28.0"}).encode()  # 21 bytes: complete after ~5 s
    fake.routes = vllm_like(["/start_profile"], **{"GET /version": dribble(ok_head(body), body)})
    assert capture(fake, tmp_path, "--request-timeout", "1") == 3
    err = one_line(capsys)
    assert f"cannot reach a server at {fake.url} (GET /version: no complete answer within 1 s)" in err
    assert ("GET", "/v1/models") not in fake.seen and not (tmp_path / "runs").exists()


def test_dribbled_stream_is_cut_at_the_deadline(fake: FakeServer, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    chunk = {"choices": [{"index": 0, "text": "", "token_ids": [11], "finish_reason": "length"}]}
    sse = f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode()
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
    fake.routes = vllm_like(["/start_profile"], **{"POST /v1/completions": dribble(head, sse, every_s=0.05)})
    assert capture(fake, tmp_path, "--request-timeout", "1") == 3
    assert "(POST /v1/completions: no complete answer within 1 s)" in one_line(capsys)
    assert ("POST", "/start_profile") not in fake.seen


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
def test_request_timeout_must_be_a_real_deadline(fake: FakeServer, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str], value: str) -> None:
    assert capture(fake, tmp_path, "--request-timeout", value) == 2
    assert "--request-timeout must be more than 0" in one_line(capsys)
    assert fake.seen == []


# -- class 8: every field read from a server is validated into a typed record ---------------------------------

def _models(**fields: object) -> tuple[int, bytes]:
    return 200, json.dumps({"data": [{"id": MODEL, "root": MODEL, **fields}]}).encode()


def _parallel(**fields: object) -> tuple[int, bytes]:
    return 200, json.dumps({"vllm_config": {"parallel_config": fields}}).encode()


def _stream(*events: bytes) -> tuple[int, bytes]:
    return 200, b"".join(b"data: " + e + b"\n\n" for e in events) + b"data: [DONE]\n\n"


DEEP = b"[" * 100_000 + b"]" * 100_000  # json.loads: RecursionError
TOKEN = json.dumps({"choices": [{"index": 0, "text": "", "token_ids": [11], "finish_reason": "length"}]}).encode()


@pytest.mark.parametrize(("routes", "message"), [
    ({"GET /version": (200, DEEP)}, "is not a vLLM server (GET /version: HTTP 200, no version field)"),
    ({"GET /version": (200, b'{"version": ["0.28"]}')}, "no version field"),
    ({"GET /version": (200, b'{"version": "0.28\\u001b[2J"}')}, "GET /version version is '0.28\\x1b[2J', not a "
                                                                "printable string"),
    ({"GET /v1/models": (200, DEEP)}, "GET /v1/models lists no model"),
    ({"GET /v1/models": _models(max_model_len=float("nan"))}, "max_model_len is nan, not a whole number"),
    ({"GET /v1/models": _models(max_model_len=float("inf"))}, "max_model_len is inf, not a whole number"),
    ({"GET /v1/models": _models(max_model_len="4096")}, "max_model_len is '4096', not a whole number"),
    ({"GET /v1/models": _models(max_model_len=[4096])}, "max_model_len is [4096], not a whole number"),
    ({"GET /v1/models": _models(max_model_len=True)}, "max_model_len is True, not a whole number"),
    ({"GET /v1/models": _models(max_model_len=1e20)}, "max_model_len is 1e+20, not a whole number in 1-2147483648"),
    ({"GET /v1/models": (200, b'{"data": [{"id": {"a": 1}}]}')}, "GET /v1/models id is {'a': 1}, not a printable"),
    ({"GET /server_info": _parallel(tensor_parallel_size="two")}, "tensor_parallel_size is 'two', not a whole"),
    ({"GET /server_info": _parallel(tensor_parallel_size=2.5)}, "tensor_parallel_size is 2.5, not a whole"),
    ({"GET /server_info": _parallel(pipeline_parallel_size=None, data_parallel_size=[1])},
     "data_parallel_size is [1], not a whole number"),
    ({"GET /server_info": (200, b'{"vllm_config": {"parallel_config": [1, 2]}}')},
     "parallel_config is [1, 2], not a JSON object"),
    ({"GET /server_info": (200, b'{"vllm_config": {"model_config": {"enforce_eager": "yes"}}}')},
     "enforce_eager is 'yes', not true or false"),
    ({"POST /v1/completions": _stream(b"not json")}, "a stream event is not JSON, not an object: 'not json'"),
    ({"POST /v1/completions": _stream(b"[1, 2, 3]")}, "a stream event is a JSON list, not an object"),
    ({"POST /v1/completions": _stream(b'"error"')}, "a stream event is a JSON str, not an object"),
    ({"POST /v1/completions": _stream(DEEP[:20_000] + DEEP[-20_000:])}, "a stream event is not JSON"),
    ({"POST /v1/completions": _stream(b'{"choices": {"0": 1}}')}, "choices is {'0': 1}, not a list"),
    ({"POST /v1/completions": _stream(b'{"choices": [7]}')}, "choice is 7, not an object"),
    ({"POST /v1/completions": _stream(b'{"choices": [{"token_ids": "11"}]}')}, "token_ids is '11', not a list"),
    ({"POST /v1/completions": _stream(b'{"choices": [{"token_ids": [11, 12]}]}')},
     "token_ids is [11, 12], not a list of at most 1 token ids"),
    ({"POST /v1/completions": _stream(b'{"choices": [{"text": 5}]}')}, "text is 5, not a string"),
    ({"POST /v1/completions": _stream(TOKEN, b'{"choices": [], "usage": {"completion_tokens": -1}}')},
     "usage completion_tokens is -1, not a whole number"),
    ({"POST /v1/completions": _stream(b'{"choices": null}')}, "the stream ended without a token (1 asked)"),
    ({"POST /v1/completions": _stream(b'{"error": {"message": "bad\\n\\u001b[31mthing"}}')},
     "failed the request: bad thing"),
])
def test_malformed_answers_are_one_line(fake: FakeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        routes: dict[str, tuple[int, bytes]], message: str) -> None:
    fake.routes = vllm_like(["/start_profile"], **routes)
    assert capture(fake, tmp_path) == 2
    err = one_line(capsys)
    assert message in err and fake.url in err
    assert ("POST", "/start_profile") not in fake.seen and not (tmp_path / "runs").exists()


def test_integral_floats_and_missing_fields_are_fine() -> None:
    from phaseprof.capture.server.answers import EngineModel, ParallelLayout, stream_event

    layout = ParallelLayout.of({"tensor_parallel_size": 2.0, "pipeline_parallel_size": None})
    assert (layout.tensor, layout.pipeline, layout.world_size) == (2, 1, 2)
    assert EngineModel.of({}).to_dict() == {"enforce_eager": None, "dtype": None, "max_model_len": None,
                                            "quantization": None}
    event = stream_event(TOKEN, max_tokens=4)
    assert event.tokens == (1,) and event.finish_reasons == ("length",) and event.error is None


# -- class 9: every read from the network is capped, and every size derived from it ------------------------

def huge_body(status: str, claimed: int, sent: int) -> Raw:
    """Claims ``claimed`` bytes of body and sends ``sent`` (then hangs up): a capped reader stops at its cap,
    an uncapped one reads all that comes."""

    def route(write: Callable[[bytes], None]) -> None:
        write(f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {claimed}\r\n"
              "Connection: close\r\n\r\n".encode())
        block = b" " * (1 << 20)
        for _ in range(sent >> 20):
            write(block)

    return route


def raw_stream(*parts: bytes) -> Raw:
    def route(write: Callable[[bytes], None]) -> None:
        write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
        for part in parts:
            write(part)

    return route


@pytest.mark.parametrize(("routes", "code", "message"), [
    # A "3 GiB" /version (24 MiB actually sent, so that an uncapped reader ends too): refused at 16 MiB.
    ({"GET /version": huge_body("200 OK", 3 << 30, 24 << 20)}, 2,
     "GET /version answered more than 16 MiB; no vLLM answer is that large"),
    ({"GET /openapi.json": huge_body("200 OK", 3 << 30, 24 << 20)}, 2, "GET /openapi.json answered more than 16 MiB"),
    # A stream line with no newline: refused at 1 MiB, not read whole into memory.
    ({"POST /v1/completions": raw_stream(b"data: " + b"7" * (4 << 20))}, 2, "a stream line is longer than 1 MiB"),
    # An endless stream of keep-alives for a 1-token request.
    ({"POST /v1/completions": raw_stream(b": ping\n" * 50_000)}, 2, "the stream ran past 1040 lines for 1 token(s)"),
    # A rejected request with a huge body: its message comes from the first 64 KiB.
    ({"POST /v1/completions": huge_body("400 Bad Request", 3 << 30, 8 << 20)}, 2,
     "rejected the request (HTTP 400):"),
    # tp x pp = 1000 x 1000 ranks: refused before any size is derived from it (a set of 1e6 ranks, a wait).
    ({"GET /server_info": _parallel(tensor_parallel_size=1000, pipeline_parallel_size=1000)}, 2,
     "parallel sizes 1000 x 1000 x 1 = 1000000 ranks, more than 4096"),
    ({"GET /server_info": _parallel(tensor_parallel_size=10**9)}, 2,
     "tensor_parallel_size is 1000000000, not a whole number in 1-1024"),
])
def test_network_reads_are_capped(fake: FakeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                  routes: dict[str, object], code: int, message: str) -> None:
    fake.routes = vllm_like(["/start_profile", "/stop_profile"],
                            **{"POST /start_profile": (200, b""), "POST /stop_profile": (200, b""), **routes})
    assert capture(fake, tmp_path) == code
    assert message in one_line(capsys)
    assert not (tmp_path / "runs").exists()


# -- class 3: captures sharing one --trace-dir each take their own trace; no breakdown is no success ----------

def _sse_route(write: Callable[[bytes], None]) -> None:
    respond(write, 200, _stream(TOKEN)[1])


def test_two_captures_sharing_a_trace_dir_take_their_own_traces(tmp_path: Path) -> None:
    """Two servers, one shared torch_profiler_dir, one --out; the profile windows overlap: A stops (and writes
    its trace) while B is profiling, B stops a second later. Each new trace appears while the other capture is
    waiting for its own. Before, each took both files (two rank-0 traces: "no breakdown", exit 0)."""
    traces = tmp_path / "traces"
    traces.mkdir()
    b_profiling, a_stopped = threading.Event(), threading.Event()
    written: dict[str, str] = {}

    def write_trace(who: str) -> None:  # as a vLLM worker does inside /stop_profile (torch's file name)
        written[who] = f"dp0_pp0_tp0_dcp0_ep0_rank0.{time.time_ns()}.pt.trace.json.gz"
        shutil.copy(REAL_TRACE, traces / written[who])

    def a_stop(write: Callable[[bytes], None]) -> None:
        b_profiling.wait(60)
        write_trace("a")
        a_stopped.set()
        respond(write)

    def b_start(write: Callable[[bytes], None]) -> None:
        b_profiling.set()
        respond(write)

    b_requests = 0

    def b_completion(write: Callable[[bytes], None]) -> None:
        nonlocal b_requests
        b_requests += 1
        if b_requests == 2:  # B's profiled request ends well after A's /stop_profile (clock slack and more)
            a_stopped.wait(60)
            time.sleep(CLOCK_SLACK_S + 0.5)
        _sse_route(write)

    def b_stop(write: Callable[[bytes], None]) -> None:
        write_trace("b")
        respond(write)

    def run(server: FakeServer) -> Path:
        req = ServerCapture(capture=CaptureOptions(phase=Phase.PREFILL, prompt_tokens=16, reps=1, warmup=0,
                                                   out=tmp_path / "runs"),
                            server=ServerTarget(server.url, timeout_s=60), trace_dir=traces, trace_wait_s=30)
        res = capture_from_server(req, console=Console(quiet=True))
        assert res.breakdown_error is None and len(res.breakdowns) == 1
        return res.run_dir

    with serving() as a, serving() as b:
        a.routes = vllm_like(["/start_profile", "/stop_profile"],
                             **{"POST /start_profile": (200, b""), "POST /stop_profile": a_stop})
        b.routes = vllm_like(["/start_profile", "/stop_profile"],
                             **{"POST /start_profile": b_start, "POST /stop_profile": b_stop,
                                "POST /v1/completions": b_completion})
        with ThreadPoolExecutor(2) as pool:
            run_a, run_b = pool.submit(run, a), pool.submit(run, b)
            dirs = {"a": run_a.result(timeout=120), "b": run_b.result(timeout=120)}
    assert dirs["a"] != dirs["b"]
    for who, run_dir in dirs.items():
        doc = json.loads((run_dir / "run.json").read_text())
        assert doc["profile"]["rank_traces"] == [written[who]] and doc["breakdown"] == "breakdown.json"


def test_a_trace_from_another_profile_window_is_not_taken(fake: FakeServer, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """A trace that appears after /stop_profile but was exported before it (another capture's) is not this
    capture's: with nothing of its own, the capture fails and says what it saw."""
    def stop(write: Callable[[bytes], None]) -> None:
        stamp = time.time_ns() - int((CLOCK_SLACK_S + 5) * 1e9)  # exported 5 s before this /stop_profile
        shutil.copy(REAL_TRACE, tmp_path / f"dp0_pp0_tp0_dcp0_ep0_rank0.{stamp}.pt.trace.json.gz")
        respond(write)

    fake.routes = vllm_like(["/start_profile", "/stop_profile"],
                            **{"POST /start_profile": (200, b""), "POST /stop_profile": stop})
    assert capture(fake, tmp_path) == 2
    assert ("no new trace appeared within 1 s after /stop_profile; is this the server's torch_profiler_dir (on "
            "this machine)? (1 new trace(s) there were exported outside this capture's /stop_profile: another "
            "client's profile, or a profiler that stopped by itself, as with --profiler-config max_iterations)"
            ) in one_line(capsys)
    assert not (tmp_path / "runs").exists()


def test_two_traces_of_one_rank_in_the_window_are_refused(tmp_path: Path) -> None:
    names = [f"dp0_pp0_tp0_dcp0_ep0_rank0.{time.time_ns() + k}.pt.trace.json.gz" for k in (0, 1)]
    window = ProfileWindow(time.time_ns() - 10**9, time.time_ns() + 10**9)
    before = snapshot(tmp_path)
    for name in names:
        shutil.copy(REAL_TRACE, tmp_path / name)
    with pytest.raises(PhaseprofError, match="rank 0 has 2 new traces in this capture's profile window"):
        wait_for_traces(tmp_path, before, expected=None, timeout_s=10, stable_s=0.1, poll_s=0.05, window=window)


def test_profile_window() -> None:
    w = ProfileWindow(stop_sent_ns=10**16, stop_done_ns=10**16 + 10**9, slack_ns=0)
    assert w.holds(f"dp0_pp0_tp0_dcp0_ep0_rank0.{10**16 + 5}.pt.trace.json.gz")
    assert not w.holds(f"dp0_pp0_tp0_dcp0_ep0_rank0.{10**16 - 5}.pt.trace.json.gz")  # exported before
    assert not w.holds(f"dp0_pp0_tp0_dcp0_ep0_rank0.{10**16 + 2 * 10**9}.pt.trace.json")  # after the answer
    assert not w.holds("rank0.pt.trace.json.gz")  # no export stamp: nobody's in particular
    assert export_stamp_ns("vm_15857.async_llm.1796074716189440076.pt.trace.json.gz") == 1796074716189440076


def test_no_breakdown_is_no_success(fake: FakeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The run directory keeps the trace, but a capture whose analysis failed exits 2, not 0."""
    def stop(write: Callable[[bytes], None]) -> None:
        shutil.copy(REAL_TRACE, tmp_path / f"dp0_pp0_tp0_dcp0_ep0_rank0.{time.time_ns()}.pt.trace.json.gz")
        respond(write)

    import phaseprof.capture.server.capture as server

    monkeypatch.setattr(server, "analyze_into", lambda *a, **k: (None, "analysis failed: (the analysis, stubbed)"))
    fake.routes = vllm_like(["/start_profile", "/stop_profile"],
                            **{"POST /start_profile": (200, b""), "POST /stop_profile": stop})
    assert capture(fake, tmp_path) == 2
    run_dir = next((tmp_path / "runs").iterdir())
    assert f"{run_dir}: no breakdown: analysis failed: (the analysis, stubbed) (the traces and run.json are kept " \
           "there)" in one_line(capsys)
    assert json.loads((run_dir / "run.json").read_text())["breakdown_error"].startswith("analysis failed")


def test_a_very_long_model_id_still_names_a_run_directory(fake: FakeServer, tmp_path: Path) -> None:
    """A 500-character model id (allowed: ids are checked up to 512) made a directory name the file system
    refused (OSError: File name too long, a traceback); the name keeps 64 characters of it."""
    def stop(write: Callable[[bytes], None]) -> None:
        shutil.copy(REAL_TRACE, tmp_path / f"dp0_pp0_tp0_dcp0_ep0_rank0.{time.time_ns()}.pt.trace.json.gz")
        respond(write)

    model = "org/" + "m" * 500
    fake.routes = vllm_like(["/start_profile", "/stop_profile"], **{
        "GET /v1/models": (200, json.dumps({"data": [{"id": model, "max_model_len": 512}]}).encode()),
        "POST /start_profile": (200, b""), "POST /stop_profile": stop})
    assert capture(fake, tmp_path) == 0
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert run_dir.name.endswith(f"-server-{'m' * 64}-prefill-16")
    assert json.loads((run_dir / "run.json").read_text())["model"]["name"] == model
