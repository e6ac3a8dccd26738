"""Fuzzing ``capture --server``'s reading of a server's answers, in-process.

A fake vLLM server on 127.0.0.1 (``tests/capture/test_server_hostile.py``) answers every probe and streamed
completion as vLLM does, except for one place per case, where hypothesis puts any JSON value (deep nesting, NaN,
inf, integers past int64, strings with controls or markup, lists for objects) or raw bytes. ``/start_profile``
answers 404, so every case ends before profiling: the fuzz is about reading answers, not traces.

Every case must end with exit 2 or 3 and exactly one line on stderr: an exception out of ``main`` (a traceback),
another exit code or several lines fails. CI runs ``PHASEPROF_SERVER_FUZZ_EXAMPLES`` (default 60) derandomized
cases in about half a minute.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from phaseprof.commands.main import main
from tests.capture.test_server_errors import MODEL, vllm_like
from tests.capture.test_server_hostile import FakeServer, serving

EXAMPLES = int(os.environ.get("PHASEPROF_SERVER_FUZZ_EXAMPLES", "60"))
SEED = int(os.environ.get("PHASEPROF_SERVER_FUZZ_SEED", "0"))

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([1e300, -0.0, 4096.0, 2.5]),
    st.text(max_size=30), st.sampled_from(["[/]", "[link=file:///etc]x[/link]", "\x1b[2J", "4096", "", "a\nb"]),
)
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                      max_leaves=12)


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


def _dumps(value: Any) -> bytes:
    """JSON as Python writes it (NaN and Infinity included, as a careless server would)."""
    return json.dumps(value, allow_nan=True).encode()


def _chunk(**choice: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "text": "", "token_ids": [11], "finish_reason": "length", **choice}]}


def _sse(*events: bytes) -> tuple[int, bytes]:
    return 200, b"".join(b"data: " + e + b"\n\n" for e in events) + b"data: [DONE]\n\n"


#: Where a fuzzed value goes: (route, answer built around the value).
PLACES = {
    "version": lambda v: ("GET /version", (200, _dumps({"version": v}))),
    "models": lambda v: ("GET /v1/models", (200, _dumps(v))),
    "model_id": lambda v: ("GET /v1/models", (200, _dumps({"data": [{"id": v, "root": MODEL}]}))),
    "model_root": lambda v: ("GET /v1/models", (200, _dumps({"data": [{"id": MODEL, "root": v}]}))),
    "max_model_len": lambda v: ("GET /v1/models", (200, _dumps({"data": [{"id": MODEL, "max_model_len": v}]}))),
    "openapi": lambda v: ("GET /openapi.json", (200, _dumps({"paths": v}))),
    "parallel": lambda v: ("GET /server_info", (200, _dumps({"vllm_config": {"parallel_config": v}}))),
    "tp": lambda v: ("GET /server_info",
                     (200, _dumps({"vllm_config": {"parallel_config": {"tensor_parallel_size": v}}}))),
    "engine": lambda v: ("GET /server_info",
                         (200, _dumps({"vllm_config": {"model_config": {"enforce_eager": v, "max_model_len": v}}}))),
    "event": lambda v: ("POST /v1/completions", _sse(_dumps(v))),
    "choices": lambda v: ("POST /v1/completions", _sse(_dumps({"choices": v}))),
    "token_ids": lambda v: ("POST /v1/completions", _sse(_dumps(_chunk(token_ids=v)))),
    "text": lambda v: ("POST /v1/completions", _sse(_dumps(_chunk(token_ids=None, text=v)))),
    "finish": lambda v: ("POST /v1/completions", _sse(_dumps(_chunk(finish_reason=v)))),
    "usage": lambda v: ("POST /v1/completions", _sse(_dumps(_chunk()), _dumps({"choices": [], "usage": v}))),
    "error": lambda v: ("POST /v1/completions", _sse(_dumps({"error": v}))),
    "rejected": lambda v: ("POST /v1/completions", (400, _dumps(v))),
}


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeServer]:
    with serving() as server:
        yield server


def _case(fake: FakeServer, tmp_path: Path, route: str, answer: tuple[int, bytes],
          capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    fake.routes = vllm_like(["/start_profile"], **{"POST /start_profile": (404, b'{"detail":"Not Found"}'),
                                                   route: answer})
    rc = main(["capture", "--server", fake.url, "--trace-dir", str(tmp_path), "--tokens", "16", "--reps", "1",
               "--warmup", "0", "--out", str(tmp_path / "runs"), "--request-timeout", "5"])
    err = capsys.readouterr().err.strip()
    assert rc in (2, 3), (route, answer[1][:200], rc, err)
    assert len(err.splitlines()) == 1 and err.startswith("error:"), (route, answer[1][:200], err)
    assert not (tmp_path / "runs").exists()


@seed(SEED)
@settings(max_examples=EXAMPLES, deadline=None, derandomize=SEED == 0,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(place=st.sampled_from(sorted(PLACES)), value=values)
def test_any_value_anywhere_is_one_line(fake: FakeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        place: str, value: Any) -> None:
    route, answer = PLACES[place](value)
    _case(fake, tmp_path, route, answer, capsys)


@seed(SEED)
@settings(max_examples=max(EXAMPLES // 4, 10), deadline=None, derandomize=SEED == 0,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(route=st.sampled_from(["GET /version", "GET /v1/models", "GET /server_info", "POST /v1/completions"]),
       body=st.one_of(st.binary(max_size=200), st.sampled_from([_deep(50_000).encode(), b"NaN", b"[]", b"null"])))
def test_any_bytes_anywhere_are_one_line(fake: FakeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         route: str, body: bytes) -> None:
    answer = _sse(body) if route.startswith("POST") else (200, body)
    _case(fake, tmp_path, route, answer, capsys)

