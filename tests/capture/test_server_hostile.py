"""``capture --server`` against a hostile or broken server (issue #22, classes 8-11): a fake vLLM server in this
process, on 127.0.0.1, with one mode per class. Every answer is untrusted input: the capture ends with exit 0,
or with exit 2/3 and one line on stderr — never a traceback, never a hang, never memory without bound.

Modes write raw bytes (``Raw``): a body that never ends, a byte every few tenths of a second, a stream line with
no newline. Deadlines in these tests are 1 s; a dribbling answer would be complete after a few seconds, so a
capture that waits for it instead of cutting it at the deadline goes on and fails differently."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from phaseprof.cli import main
from tests.capture.test_server_errors import MODEL, vllm_like

#: A route that writes its own bytes (status line included) to the socket: ``write(data)``.
Raw = Callable[[Callable[[bytes], None]], None]


@dataclass
class FakeServer:
    """Routes by (method, path) as in test_server_errors.Stub; a route may also be ``Raw``."""

    routes: dict[tuple[str, str], object] = field(default_factory=dict)
    seen: list[tuple[str, str]] = field(default_factory=list)
    url: str = ""
    stop: threading.Event = field(default_factory=threading.Event)


@pytest.fixture
def fake() -> Iterator[FakeServer]:
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
