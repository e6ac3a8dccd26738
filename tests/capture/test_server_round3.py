"""``capture --server`` bounds what a server sends, whatever its framing.

- ``--request-timeout`` is a wall-clock deadline for the whole answer also when the server frames it with
  ``Connection: close`` and no length and drips it (``http.client`` hands such a socket to the response and
  forgets it: the cut used to reach nothing, and a 10 s deadline ran ~150 s).
- The trace the server's profiler writes is read up to ``MAX_SERVER_TRACE_BYTES`` decompressed (a 4 GB trace,
  a gzip bomb): past it the trace is refused in one line and the run directory still keeps run.json and the
  timings. ``--max-trace-mb`` bounds the trace.json.gz written, as in-process.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phaseprof.capture.server import capture as server_capture
from phaseprof.capture.server.traces import ends_properly
from tests.capture.test_server_errors import REAL_TRACE, vllm_like
from tests.capture.test_server_hostile import FakeServer, capture, dribble, fake, one_line, respond  # noqa: F401

TOKEN = {"choices": [{"index": 0, "text": "", "token_ids": [11], "finish_reason": None}]}


@pytest.mark.parametrize("route", ["GET /version", "POST /v1/completions"])
def test_a_dripping_connection_close_answer_ends_at_the_deadline(fake: FakeServer, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str],
                                                                 route: str) -> None:
    """No length, ``Connection: close``, a byte every 50 ms for 15 s: cut at the 1 s deadline."""
    if route == "GET /version":
        body = json.dumps({"version": "0.28.0", "pad": " " * 300}).encode()
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n"
    else:
        body = (f"data: {json.dumps(TOKEN)}\n\n" * 4).encode() + b"data: [DONE]\n\n"
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
    fake.routes = vllm_like(["/start_profile"], **{route: dribble(head, body, every_s=0.05)})
    t0 = time.monotonic()
    assert capture(fake, tmp_path, "--request-timeout", "1") == 3
    elapsed = time.monotonic() - t0
    assert f"({route}: no complete answer within 1 s)" in one_line(capsys)
    assert elapsed < 4, elapsed  # the whole answer takes 15 s or more


def _stop_writing(trace_dir: Path, write: Callable[[Path], None]) -> Callable[[Callable[[bytes], None]], None]:
    def route(send: Callable[[bytes], None]) -> None:  # as a vLLM worker does inside /stop_profile
        write(trace_dir / f"dp0_pp0_tp0_dcp0_ep0_rank0.{time.time_ns()}.pt.trace.json.gz")
        respond(send)
    return route


def _profiling(fake: FakeServer, tmp_path: Path, write: Callable[[Path], None]) -> None:
    fake.routes = vllm_like(["/start_profile", "/stop_profile"], **{
        "POST /start_profile": (200, b""), "POST /stop_profile": _stop_writing(tmp_path, write)})


def _bomb(path: Path) -> None:
    """20 MB of blanks in 20 KB of gzip, then a member that never ends the document."""
    path.write_bytes(gzip.compress(b"{" + b" " * (20 << 20), compresslevel=9))


@pytest.mark.parametrize("kind", ["bomb", "big-plain"])
def test_a_trace_past_the_bound_is_refused_and_the_run_is_kept(fake: FakeServer, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str],
                                                               monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    monkeypatch.setattr(server_capture, "MAX_SERVER_TRACE_BYTES", 8 << 20)  # the real trace inflates to 4 MB

    def write(path: Path) -> None:
        if kind == "bomb":
            _bomb(path)
        else:  # 4 GB of JSON on disk (sparse: costs no disk), ending like a complete trace
            with open(path.with_suffix(""), "wb") as f:
                f.seek(4 << 30)
                f.write(b"}")

    _profiling(fake, tmp_path, write)
    assert capture(fake, tmp_path) == 2
    line = one_line(capsys)
    assert "no breakdown: trace not kept" in line and "over 8 MB decompressed" in line
    (run,) = (tmp_path / "runs").iterdir()
    doc = json.loads((run / "run.json").read_text())
    assert doc["ttft_ms"] > 0 and "over 8 MB decompressed" in doc["trace"]["refused"]
    assert not (run / "trace.json.gz").exists()


def test_a_real_trace_under_the_bound_is_read(fake: FakeServer, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server_capture, "MAX_SERVER_TRACE_BYTES", 8 << 20)
    _profiling(fake, tmp_path, lambda p: shutil.copy(REAL_TRACE, p))
    assert capture(fake, tmp_path, "--max-trace-mb", "0.25") == 0, capsys.readouterr().err
    (run,) = (tmp_path / "runs").iterdir()
    doc = json.loads((run / "run.json").read_text())
    assert doc["trace"]["max_bytes"] == 0.25 * 1024 * 1024  # --max-trace-mb reaches the server path
    assert (run / "trace.json.gz").stat().st_size <= 0.25 * 1024 * 1024


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "1e300"])
def test_max_trace_mb_is_bounded(fake: FakeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                 value: str) -> None:
    assert capture(fake, tmp_path, "--max-trace-mb", value) == 2
    assert "--max-trace-mb must be more than 0" in one_line(capsys)
    assert fake.seen == []  # refused before any request


def test_completeness_check_of_a_bomb_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``ends_properly`` looks through a gzip stream in bounded pieces and stops past ``MAX_CHECKED_BYTES``."""
    from phaseprof.capture.server import traces

    p = tmp_path / "x.pt.trace.json.gz"
    _bomb(p)
    monkeypatch.setattr(traces, "MAX_CHECKED_BYTES", 1 << 20)
    t0 = time.monotonic()
    assert ends_properly(p)  # taken as written: the reader refuses it in one line
    assert time.monotonic() - t0 < 1
    monkeypatch.setattr(traces, "MAX_CHECKED_BYTES", 1 << 30)
    assert ends_properly(p)  # 20 MB: decompressed to its end
    p.write_bytes(p.read_bytes()[:-8])  # the gzip trailer cut off: still being written
    assert not ends_properly(p)
    assert os.path.getsize(p) > 0


def _framed(framing: str, body: bytes, every_s: float) -> Callable[[Callable[[bytes], None]], None]:
    """The stream's answer framed as a server might: a correct length, a length that promises more than comes,
    no length and ``Connection: close``, or chunked; written in pieces ``every_s`` apart."""
    head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
    if framing == "length":
        head += f"Content-Length: {len(body)}\r\n"
    elif framing == "short-length":
        head += f"Content-Length: {len(body) + 1000}\r\n"
    elif framing == "chunked":
        head += "Transfer-Encoding: chunked\r\n"
        body = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 7]), body[i:i + 7]) for i in range(0, len(body), 7)) + \
            b"0\r\n\r\n"
    head += "Connection: close\r\n\r\n"

    def route(write: Callable[[bytes], None]) -> None:
        write(head.encode())
        for i in range(0, len(body), 16):
            if every_s:
                time.sleep(every_s)
            write(body[i:i + 16])

    return route


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(framing=st.sampled_from(["length", "short-length", "close", "chunked"]),
       every_s=st.sampled_from([0.0, 0.02, 0.2]), events=st.integers(0, 40), cut=st.booleans())
def test_any_stream_framing_ends_by_its_deadline(tmp_path_factory: pytest.TempPathFactory,
                                                 capsys: pytest.CaptureFixture[str], framing: str, every_s: float,
                                                 events: int, cut: bool) -> None:
    """Whatever the framing, pace and length of a streamed answer: the capture ends within the 1 s request
    deadline (plus start-up), with exit 0, or 2/3 and one line."""
    from tests.capture.test_server_hostile import serving

    body = (f"data: {json.dumps(TOKEN)}\n\n" * events).encode() + (b"" if cut else b"data: [DONE]\n\n")
    tmp = tmp_path_factory.mktemp("drip")
    with serving() as server:
        server.routes = vllm_like(["/start_profile"],
                                  **{"POST /v1/completions": _framed(framing, body, every_s)})
        t0 = time.monotonic()
        code = capture(server, tmp, "--request-timeout", "1")
        took = time.monotonic() - t0
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err
    assert code in (0, 2, 3) and (code == 0 or len(err.splitlines()) == 1), (code, err)
    assert took < 6, took  # 2 requests (1 rep + the profiled round is never reached: /start_profile is 404)
