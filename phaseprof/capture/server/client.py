"""A small HTTP client for one running vLLM OpenAI-compatible server (stdlib ``http.client`` only).

Every request goes to the one ``base_url`` given (redirects are never followed), with a timeout. What it reads:
``GET /version`` (vLLM's own endpoint: ``{"version": "0.28.0"}``; an OpenAI-compatible server without it is not
vLLM), ``GET /v1/models`` (model id, ``root``, ``max_model_len``), ``GET /openapi.json`` (whether the
``/start_profile`` route exists: vLLM adds it only when ``--profiler-config`` names a profiler),
``GET /server_info`` (only with ``VLLM_SERVER_DEV_MODE=1``: the parallel config), and streamed
``POST /v1/completions`` with token-id prompts.

Every answer is untrusted: a request has one deadline for all of it, bodies and stream lines are read with
caps (MAX_BODY_BYTES, MAX_LINE_BYTES, lines per token asked), and fields are checked in ``server.answers``.
"""

from __future__ import annotations

import http.client
import ipaddress
import itertools
import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from phaseprof.capture.server.answers import BadAnswer, error_text, one_line, parse_json, stream_event
from phaseprof.errors import EnvironmentProblem, PhaseprofError

#: Largest answer body read (vLLM's /openapi.json is ~200 KB; the rest are far smaller).
MAX_BODY_BYTES = 16 << 20
#: Of a rejected request's body, only this much is read (for its message).
MAX_ERROR_BYTES = 64 << 10
#: Longest line of a streamed completion (one event: a few hundred bytes).
MAX_LINE_BYTES = 1 << 20
_CHUNK = 1 << 16

PROFILER_FLAG = "--profiler-config '{\"profiler\": \"torch\", \"torch_profiler_dir\": \"DIR\"}'"


class ServerError(PhaseprofError):
    """The server answered, but not as a usable vLLM server (not vLLM, profiling off, request rejected)."""


class Unreachable(EnvironmentProblem):
    """Nothing answered at the URL (connection refused, DNS failure, timeout)."""


@dataclass(frozen=True)
class Endpoint:
    """``scheme://host:port`` of the server; ``prefix`` is a path prefix (a server behind a proxy path)."""

    scheme: str
    host: str
    port: int
    prefix: str

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host  # an IPv6 literal keeps its brackets
        return f"{self.scheme}://{host}:{self.port}{self.prefix}"


#: A host name (RFC 1123 labels, plus "_" as in container names) or an IPv4 literal (IPv6: ``ipaddress``).
_HOST_NAME = re.compile(r"(?=.{1,253}$)[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
                        r"(?:\.[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)*\.?")
#: A path prefix: ``/a/b`` of URL-safe characters only (no query, no fragment, no spaces or controls).
_PREFIX = re.compile(r"(?:/[A-Za-z0-9._~!$&'()*+,;=:@%-]+)*/?")


def parse_url(url: str) -> Endpoint:
    """``http://HOST:PORT[/prefix]`` -> Endpoint; anything else is one clear error. Every part is checked (no
    default port is silently put in place of a wrong one): scheme http/https, a host name or IP literal, a port
    in 1-65535 (80/443 only when no port is written at all), a plain path prefix, nothing else."""
    bad = f"--server {url!r}:"
    text = url.strip()
    if not text or len(text) > 2048 or any(not 0x21 <= ord(ch) <= 0x7E for ch in text):
        raise PhaseprofError(f"{bad} expected http://HOST:PORT (printable ASCII, no spaces), e.g. "
                             "http://127.0.0.1:8000")
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as e:  # "Invalid IPv6 URL", "Port out of range 0-65535", a non-numeric port
        raise PhaseprofError(f"{bad} not a valid URL ({e}); expected http://HOST:PORT") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise PhaseprofError(f"{bad} expected http://HOST:PORT (e.g. http://127.0.0.1:8000)")
    if parts.query or parts.fragment or "@" in parts.netloc or "?" in text or "#" in text:
        raise PhaseprofError(f"{bad} give only scheme, host, port (and a path prefix)")
    host = parts.hostname
    if "[" in parts.netloc:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise PhaseprofError(f"{bad} {host!r} in brackets is not an IPv6 address") from None
    elif not _HOST_NAME.fullmatch(host):
        raise PhaseprofError(f"{bad} {host!r} is not a host name or IP address")
    if port is None and parts.netloc.endswith(":"):
        raise PhaseprofError(f"{bad} the port after ':' is missing")
    if port is not None and not 1 <= port <= 65535:
        raise PhaseprofError(f"{bad} the port must be in 1-65535, got {port}")
    if not _PREFIX.fullmatch(parts.path):
        raise PhaseprofError(f"{bad} the path prefix {parts.path!r} is not a plain URL path")
    return Endpoint(parts.scheme, host, port or (443 if parts.scheme == "https" else 80), parts.path.rstrip("/"))


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes

    def json(self) -> Any:
        """The body's JSON document; None when it is not JSON (or nested too deep to parse)."""
        return parse_json(self.body)


def error_message(resp: Response) -> str:
    """vLLM's error text (``{"error": {"message": ...}}`` or ``{"detail": ...}``), else the start of the body;
    one line, cut short."""
    return error_text(resp.json()) or one_line(resp.body[:200].decode("utf-8", "replace")) or f"HTTP {resp.status}"


@dataclass(frozen=True)
class StreamedRequest:
    """One streamed completion, timed on this process' ``perf_counter`` (client clock).

    ``t_send_s``: just before the request was written; ``chunk_t_s``: arrival of each SSE chunk that carried
    generated tokens; ``chunk_tokens``: how many tokens each such chunk carried (``token_ids`` when the server
    returns them, else 1 per chunk). TTFT = first chunk - send; TPOT = (last chunk - first chunk) / (tokens after
    the first chunk): the mean inter-token time after the first, as a user of the stream sees it.
    """

    t_send_s: float
    chunk_t_s: tuple[float, ...]
    chunk_tokens: tuple[int, ...]
    finish_reason: str | None
    usage: dict[str, int] | None

    @property
    def output_tokens(self) -> int:
        return sum(self.chunk_tokens)

    @property
    def ttft_s(self) -> float | None:
        return self.chunk_t_s[0] - self.t_send_s if self.chunk_t_s else None

    @property
    def tpot_s(self) -> float | None:
        after_first = self.output_tokens - (self.chunk_tokens[0] if self.chunk_tokens else 0)
        if after_first < 1:
            return None
        return (self.chunk_t_s[-1] - self.chunk_t_s[0]) / after_first

    @property
    def t_done_s(self) -> float | None:
        return self.chunk_t_s[-1] if self.chunk_t_s else None


class _Deadline:
    """Cuts one connection at its deadline. A socket timeout bounds each read, not the request: a server that
    sends a byte every few seconds would keep a read loop alive for ever. At the deadline the socket is shut
    down from a timer thread, so any blocked read returns at once; ``expired`` then tells why it ended.

    The socket is held from the moment the request is sent (:meth:`hold`): for an answer without a length
    (``Connection: close``) ``http.client`` hands the socket to the response and forgets it (``conn.sock`` is
    None), and a cut through the connection would then cut nothing. Readers also check :meth:`passed`."""

    def __init__(self, conn: http.client.HTTPConnection, seconds: float) -> None:
        self.conn, self.expired = conn, False
        self.sock: socket.socket | None = None
        self.at = time.monotonic() + seconds
        self._timer = threading.Timer(seconds, self._cut)
        self._timer.daemon = True
        self._timer.start()

    def hold(self) -> None:
        """Keep the connection's socket (the request is sent); cut it now if the deadline has passed."""
        self.sock = self.conn.sock
        if self.expired:
            self._cut()

    def passed(self) -> bool:
        return self.expired or time.monotonic() >= self.at

    def _cut(self) -> None:
        self.expired = True
        sock = self.sock or self.conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed

    def cancel(self) -> None:
        self._timer.cancel()


@dataclass
class ServerClient:
    """Requests to one server only. ``timeout_s`` is the deadline of each whole request (connect, headers,
    body or stream), not of one socket read; ``max_requests`` bounds how many completions one client may send
    (a capture cannot run away)."""

    endpoint: Endpoint
    timeout_s: float = 600.0
    max_requests: int = 2000
    sent: int = field(default=0, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    @contextmanager
    def _exchange(self, method: str, path: str, data: bytes | None, headers: dict[str, str],
                  timeout_s: float | None = None) -> Iterator[tuple[http.client.HTTPResponse, _Deadline]]:
        """Send one request and yield its response (headers read) under the request's deadline; network
        failures and the deadline become one ``Unreachable`` line."""
        limit = timeout_s or self.timeout_s
        cls = http.client.HTTPSConnection if self.endpoint.scheme == "https" else http.client.HTTPConnection
        conn = cls(self.endpoint.host, self.endpoint.port, timeout=limit)
        deadline = _Deadline(conn, limit)
        try:
            conn.request(method, self.endpoint.prefix + path, body=data, headers=headers)
            deadline.hold()
            yield conn.getresponse(), deadline
            if deadline.passed():  # a cut stream can end like a finished one: the deadline decides
                deadline.expired = True
                raise TimeoutError
        except (OSError, http.client.HTTPException) as e:
            raise self._unreachable(e, limit, method, path, deadline.expired) from None
        except PhaseprofError as e:  # a line cut short at the deadline reads as a malformed one: say why
            if deadline.expired:
                raise self._unreachable(e, limit, method, path, True) from None
            raise
        finally:
            deadline.cancel()
            conn.close()

    def _unreachable(self, e: BaseException, limit: float, method: str, path: str, expired: bool) -> Unreachable:
        if expired or isinstance(e, (TimeoutError, socket.timeout)):
            reason = f"{method} {path}: no complete answer within {limit:g} s"
        else:
            reason = str(e) or type(e).__name__
        return Unreachable(f"cannot reach a server at {self.endpoint.url} ({reason}); is `vllm serve` running "
                           "there?")

    def request(self, method: str, path: str, body: Any = None, *, timeout_s: float | None = None) -> Response:
        """One request and its whole answer (no redirects followed), within ``timeout_s`` (default: the
        client's) in all."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if data is not None else {}
        with self._exchange(method, path, data, headers, timeout_s) as (resp, deadline):
            body = _read_capped(resp, MAX_BODY_BYTES, deadline)
            if body is None:
                raise BadAnswer(f"{self.endpoint.url}: {method} {path} answered more than "
                                f"{MAX_BODY_BYTES >> 20} MiB; no vLLM answer is that large")
            return Response(resp.status, body)

    def get_json(self, path: str, *, timeout_s: float | None = None) -> tuple[int, Any]:
        r = self.request("GET", path, timeout_s=timeout_s)
        return r.status, r.json()

    def stream_completion(self, body: dict[str, Any]) -> StreamedRequest:
        """POST ``/v1/completions`` with ``stream: true`` and time each server-sent chunk.

        A rejected request (HTTP 4xx/5xx, or an error event in the stream) raises ServerError with the
        server's own message.
        """
        with self._lock:  # rounds send from several threads
            if self.sent >= self.max_requests:
                raise PhaseprofError(f"request budget of {self.max_requests} completions spent; not sending more")
            self.sent += 1
        data = json.dumps(dict(body, stream=True)).encode()
        times: list[float] = []
        counts: list[int] = []
        finish: str | None = None
        usage: dict[str, int] | None = None
        t_send = time.perf_counter()
        with self._exchange("POST", "/v1/completions", data,
                            {"Content-Type": "application/json", "Accept": "text/event-stream"}) as (resp, deadline):
            if resp.status != 200:
                head = resp.read(MAX_ERROR_BYTES)  # the start is enough for its message
                raise ServerError(f"{self.endpoint.url} rejected the request (HTTP {resp.status}): "
                                  f"{error_message(Response(resp.status, head))}")
            limit = _token_limit(body)
            max_lines = 16 * limit + 1024  # "data:" + blank line per event, a few keep-alives: far below this
            for n_lines in itertools.count(1):
                line = resp.readline(MAX_LINE_BYTES + 1)
                if not line or deadline.passed():
                    break
                now = time.perf_counter()
                if len(line) > MAX_LINE_BYTES:
                    raise BadAnswer(f"{self.endpoint.url}/v1/completions: a stream line is longer than "
                                    f"{MAX_LINE_BYTES >> 20} MiB")
                if n_lines > max_lines:
                    raise BadAnswer(f"{self.endpoint.url}/v1/completions: the stream ran past {max_lines} lines "
                                    f"for {limit} token(s)")
                if not line.startswith(b"data:"):
                    continue
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    break
                try:
                    event = stream_event(payload, max_tokens=limit)
                except BadAnswer as e:
                    raise BadAnswer(f"{self.endpoint.url}/v1/completions: {e}") from None
                if event.error is not None:
                    raise ServerError(f"{self.endpoint.url} failed the request: {event.error}")
                usage = event.usage or usage
                for n in event.tokens:
                    if n:
                        times.append(now)
                        counts.append(n)
                finish = event.finish_reasons[-1] if event.finish_reasons else finish
        if not times:  # nothing to time: no TTFT, no TPOT
            raise BadAnswer(f"{self.endpoint.url}/v1/completions: the stream ended without a token "
                            f"({limit} asked)")
        return StreamedRequest(t_send, tuple(times), tuple(counts), finish, usage)


def _read_capped(resp: http.client.HTTPResponse, limit: int, deadline: _Deadline | None = None) -> bytes | None:
    """The whole body, or None once it runs past ``limit`` bytes (whatever Content-Length says); what came by
    the deadline, once it passes (the caller then fails the request)."""
    parts: list[bytes] = []
    size = 0
    while (deadline is None or not deadline.passed()) and (chunk := resp.read1(min(_CHUNK, limit + 1 - size))):
        parts.append(chunk)
        size += len(chunk)
        if size > limit:
            return None
    return b"".join(parts)


def _token_limit(body: dict[str, Any]) -> int:
    """Most token ids one stream event may carry: the request's ``max_tokens`` (a server sending more in one
    event is not answering this request)."""
    n = body.get("max_tokens")
    return n if isinstance(n, int) and n > 0 else 1 << 20
