"""A live server's answers are untrusted input: every field phaseprof reads from one is checked here into a typed
value, or refused with one line naming the field and what it held (docs/capture.md, "Untrusted server
answers"). Types are exact (a bool is no number, ``"4"`` is no count, NaN and inf are nobody's length) and every
number has bounds, so no size derived from an answer can exhaust memory.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from phaseprof.errors import PhaseprofError

#: Longest text kept from an answer (a version, a model id, a finish reason); longer is refused.
MAX_TEXT_CHARS = 512
#: Longest path kept (the served model's ``root``).
MAX_PATH_CHARS = 4096
#: Ranks per parallel dimension (tensor, pipeline, data) and in all: vLLM deployments are far below both.
MAX_PARALLEL = 1024
MAX_WORLD_SIZE = 4096
#: A context longer than 2^31 tokens is no real model's.
MAX_MODEL_LEN = 1 << 31
#: Server error text shown to the user is cut to this many characters.
MAX_MESSAGE_CHARS = 300


class BadAnswer(PhaseprofError):
    """The server answered, but a field is not what vLLM sends (wrong type, out of bounds, not JSON)."""


def show(value: Any, limit: int = 40) -> str:
    """A short, one-line picture of a bad value for an error message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def parse_json(body: bytes | str) -> Any:
    """The JSON document in ``body``, or None when it is not JSON (or nested too deep to parse)."""
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None


def text(value: Any, what: str, *, limit: int = MAX_TEXT_CHARS) -> str:
    """A printable string of at most ``limit`` characters."""
    if not isinstance(value, str) or not value or len(value) > limit or not value.isprintable():
        raise BadAnswer(f"{what} is {show(value)}, not a printable string of 1-{limit} characters")
    return value


def optional_text(value: Any, what: str, *, limit: int = MAX_TEXT_CHARS) -> str | None:
    return None if value is None else text(value, what, limit=limit)


def whole(value: Any, what: str, *, lo: int, hi: int) -> int:
    """A whole number in ``[lo, hi]``: an int, or a float with no fraction (JSON ``4096.0``); not a bool."""
    n = int(value) if isinstance(value, float) and math.isfinite(value) and value.is_integer() else value
    if isinstance(n, bool) or not isinstance(n, int) or not lo <= n <= hi:
        raise BadAnswer(f"{what} is {show(value)}, not a whole number in {lo}-{hi}")
    return n


def optional_whole(value: Any, what: str, *, lo: int, hi: int) -> int | None:
    return None if value is None else whole(value, what, lo=lo, hi=hi)


def optional_flag(value: Any, what: str) -> bool | None:
    if value is not None and not isinstance(value, bool):
        raise BadAnswer(f"{what} is {show(value)}, not true or false")
    return value


def optional_object(value: Any, what: str) -> dict[str, Any] | None:
    if value is not None and not isinstance(value, dict):
        raise BadAnswer(f"{what} is {show(value)}, not a JSON object")
    return value


@dataclass(frozen=True)
class ParallelLayout:
    """vLLM's parallel config as ``/server_info`` gives it (sizes default to 1 when not given)."""

    tensor: int = 1
    pipeline: int = 1
    data: int = 1
    expert_parallel: bool | None = None
    backend: str | None = None

    @classmethod
    def of(cls, doc: dict[str, Any]) -> ParallelLayout:
        def size(key: str) -> int:
            return optional_whole(doc.get(key), f"/server_info {key}", lo=1, hi=MAX_PARALLEL) or 1

        layout = cls(size("tensor_parallel_size"), size("pipeline_parallel_size"), size("data_parallel_size"),
                     optional_flag(doc.get("enable_expert_parallel"), "/server_info enable_expert_parallel"),
                     optional_text(doc.get("distributed_executor_backend"),
                                   "/server_info distributed_executor_backend"))
        if layout.world_size > MAX_WORLD_SIZE:
            raise BadAnswer(f"/server_info parallel sizes {layout.tensor} x {layout.pipeline} x {layout.data} = "
                            f"{layout.world_size} ranks, more than {MAX_WORLD_SIZE}")
        return layout

    @property
    def world_size(self) -> int:
        """Ranks that write a trace: tensor x pipeline x data parallel size."""
        return self.tensor * self.pipeline * self.data

    def to_dict(self) -> dict[str, Any]:
        return {"tensor_parallel_size": self.tensor, "pipeline_parallel_size": self.pipeline,
                "data_parallel_size": self.data, "enable_expert_parallel": self.expert_parallel,
                "distributed_executor_backend": self.backend}


@dataclass(frozen=True)
class EngineModel:
    """The few model-config fields phaseprof reads from ``/server_info``."""

    enforce_eager: bool | None = None
    dtype: str | None = None
    max_model_len: int | None = None
    quantization: str | None = None

    @classmethod
    def of(cls, doc: dict[str, Any]) -> EngineModel:
        return cls(optional_flag(doc.get("enforce_eager"), "/server_info enforce_eager"),
                   optional_text(doc.get("dtype"), "/server_info dtype"),
                   optional_whole(doc.get("max_model_len"), "/server_info max_model_len", lo=1, hi=MAX_MODEL_LEN),
                   optional_text(doc.get("quantization"), "/server_info quantization"))

    def to_dict(self) -> dict[str, Any]:
        return {"enforce_eager": self.enforce_eager, "dtype": self.dtype, "max_model_len": self.max_model_len,
                "quantization": self.quantization}


@dataclass(frozen=True)
class StreamEvent:
    """One ``data:`` event of a streamed completion: an error message, or the tokens each choice carried
    (``token_ids`` when sent, else 1 for a text chunk) with its finish reason, and the usage when sent."""

    error: str | None
    tokens: tuple[int, ...]
    finish_reasons: tuple[str, ...]
    usage: dict[str, int] | None


def stream_event(payload: bytes, *, max_tokens: int) -> StreamEvent:
    """``payload`` (a ``data:`` line's JSON) checked: an object, ``choices`` a list of objects, ``token_ids`` a
    list of at most ``max_tokens`` whole numbers, ``text`` a string, usage counts whole numbers."""
    doc = parse_json(payload)
    if not isinstance(doc, dict):
        kind = "not JSON" if doc is None else f"a JSON {type(doc).__name__}"
        raise BadAnswer(f"a stream event is {kind}, not an object: {show(payload.decode('utf-8', 'replace'))}")
    if "error" in doc:
        return StreamEvent(error_text(doc) or "(no message)", (), (), None)
    choices = doc.get("choices") or []
    if not isinstance(choices, list):
        raise BadAnswer(f"a stream event's choices is {show(choices)}, not a list")
    tokens: list[int] = []
    finish: list[str] = []
    for choice in choices:
        if not isinstance(choice, dict):
            raise BadAnswer(f"a stream event's choice is {show(choice)}, not an object")
        ids = choice.get("token_ids")
        if ids is not None and (not isinstance(ids, list) or len(ids) > max_tokens
                                or any(isinstance(t, bool) or not isinstance(t, int) for t in ids)):
            raise BadAnswer(f"a stream event's token_ids is {show(ids)}, not a list of at most {max_tokens} "
                            "token ids")
        if choice.get("text") is not None and not isinstance(choice["text"], str):
            raise BadAnswer(f"a stream event's text is {show(choice['text'])}, not a string")
        tokens.append(len(ids or []) or (1 if choice.get("text") is not None else 0))
        if (reason := optional_text(choice.get("finish_reason"), "a stream event's finish_reason")) is not None:
            finish.append(reason)
    usage = optional_object(doc.get("usage"), "a stream event's usage")
    counts = None if usage is None else {
        k: whole(usage[k], f"a stream event's usage {k}", lo=0, hi=MAX_MODEL_LEN)
        for k in ("prompt_tokens", "completion_tokens", "total_tokens") if usage.get(k) is not None}
    return StreamEvent(None, tuple(tokens), tuple(finish), counts)


def error_text(doc: Any) -> str | None:
    """vLLM's error text (``{"error": {"message": ...}}``, ``{"message": ...}`` or ``{"detail": ...}``), one
    line of at most MAX_MESSAGE_CHARS, when ``doc`` holds one."""
    if not isinstance(doc, dict):
        return None
    err = doc.get("error")
    found = next((v for v in (err.get("message") if isinstance(err, dict) else err, doc.get("message"),
                              doc.get("detail")) if v), None)
    return None if found is None else one_line(str(found) if not isinstance(found, str) else found)


def one_line(value: str) -> str:
    """``value`` on one line (whitespace runs become one space), cut to MAX_MESSAGE_CHARS."""
    flat = " ".join(value[: MAX_MESSAGE_CHARS * 4].split())
    return flat if len(flat) <= MAX_MESSAGE_CHARS else flat[: MAX_MESSAGE_CHARS - 3] + "..."
