"""What a capture or sweep is asked to do, and the pure parsers for the CLI's list and KEY=VALUE options."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from phaseprof.errors import PhaseprofError


class Phase(str, Enum):
    """Which part of a request is timed and profiled: the prefill forward (TTFT) or the decode steps (TPOT)."""

    PREFILL = "prefill"
    DECODE = "decode"

    def __str__(self) -> str:
        return self.value

    def max_tokens(self, output_tokens: int) -> int:
        """Tokens a request of this phase generates (``SamplingParams.max_tokens``): 1 for prefill (the first
        token ends it), ``output_tokens`` for decode."""
        return 1 if self is Phase.PREFILL else output_tokens

    @property
    def metric(self) -> str:
        """The headline metric of this phase: ``ttft`` for prefill, ``tpot`` (time per output token after the
        first) for decode."""
        return "ttft" if self is Phase.PREFILL else "tpot"


class Mode(str, Enum):
    """``eager``: ``enforce_eager=True`` (every kernel launched from Python). ``graph``: torch.compile + CUDA graphs."""

    EAGER = "eager"
    GRAPH = "graph"

    def __str__(self) -> str:
        return self.value


class Quant(str, Enum):
    """Weight precision: the checkpoint's bf16, or vLLM's online fp8 quantization (``quantization="fp8"``)."""

    BF16 = "bf16"
    FP8 = "fp8"

    def __str__(self) -> str:
        return self.value


class Hierarchy(str, Enum):
    """How a capture records the ``nn.Module`` tree (what ``analyze --by layer`` and the module view read).

    ``hooks``: global module forward hooks open one profiler scope per module call, named as torch's Python
    tracer names module frames (``capture.inprocess.module_scopes``). ``stack``: torch.profiler ``with_stack=True``
    (the Python tracer: every Python call, module frames among them). ``off``: no tree. Inside compiled regions
    (graph mode) neither sees submodules: the tree stops at the compiled module.
    """

    HOOKS = "hooks"
    STACK = "stack"
    OFF = "off"

    def __str__(self) -> str:
        return self.value


DEFAULT_HIERARCHY = Hierarchy.HOOKS


@dataclass(frozen=True)
class EngineOptions:
    """How the one vLLM engine of a capture or sweep is started.

    ``max_prompt_tokens``/``max_output_tokens`` size ``max_model_len`` and ``max_num_batched_tokens`` so that the
    largest request of the run fits without chunking; ``max_num_seqs`` is the most requests in flight at once.
    ``async_scheduling``: False (the default here) = the marker-friendly engine profiled steps run on (each
    ``step()`` finishes its own forward, so a step's marker holds exactly that step's work); None = vLLM's own
    default (what it serves with: on where the platform allows), the engine ``capture`` and ``sweep`` time on.
    """

    model: str | None = None
    mode: Mode = Mode.EAGER
    quant: Quant = Quant.BF16
    max_prompt_tokens: int = 128
    max_output_tokens: int = 1
    max_num_seqs: int = 2
    engine_args: dict[str, Any] = field(default_factory=dict)
    verbose: bool = False
    async_scheduling: bool | None = False


@dataclass(frozen=True)
class CaptureOptions:
    """One capture request, passed whole down either capture path: ``prompt_tokens``; decode adds
    ``output_tokens`` generated tokens (prefill generates 1: ``Phase.max_tokens``).

    ``reps`` unprofiled timed requests follow ``warmup`` untimed ones; then one profiled request.
    ``profile_decode_steps`` limits how many decode steps run under the profiler (None = all of them).
    ``hierarchy``: how the profiled request records the module tree (``Hierarchy``). ``concurrency``: requests
    added together in every timed round and in the profiled one (a decode sweep's ``--profile-at`` point).
    """

    phase: Phase
    prompt_tokens: int
    output_tokens: int = 1
    reps: int = 5
    warmup: int = 2
    seed: int = 0
    profile_decode_steps: int | None = None
    out: Path = Path("runs")
    hierarchy: Hierarchy = DEFAULT_HIERARCHY
    concurrency: int = 1

    @property
    def max_tokens(self) -> int:
        """``SamplingParams.max_tokens`` of the request: 1 for prefill (the first token ends it), N for decode."""
        return self.phase.max_tokens(self.output_tokens)

    @property
    def label(self) -> str:
        """The request in a run directory's name: ``4096`` for prefill; ``128in-32out`` for decode."""
        if self.phase is Phase.PREFILL:
            return str(self.prompt_tokens)
        return f"{self.prompt_tokens}in-{self.output_tokens}out"

    @classmethod
    def of(cls, phase: Phase, prompt_tokens: int, *, output_tokens: int, reps: int, warmup: int, seed: int = 0,
           out: Path = Path("runs"), profile_decode_steps: int | None = None,
           hierarchy: Hierarchy = DEFAULT_HIERARCHY, concurrency: int = 1) -> CaptureOptions:
        """One capture from the CLI's options, in-process or on a server: prefill generates 1 token whatever
        ``output_tokens`` says; a negative ``warmup`` means none."""
        return cls(phase=phase, prompt_tokens=prompt_tokens, output_tokens=phase.max_tokens(output_tokens),
                   reps=reps, warmup=max(warmup, 0), seed=seed, profile_decode_steps=profile_decode_steps, out=out,
                   hierarchy=hierarchy, concurrency=concurrency)


def resolve_mode(mode: Mode | None, *, cuda: bool) -> Mode:
    """``--mode`` as given, else what vLLM serves with on this device (graph with CUDA, eager on CPU)."""
    if mode is not None:
        return mode
    return Mode.GRAPH if cuda else Mode.EAGER


def parse_phases(spec: str) -> list[Phase]:
    """``prefill``, ``decode`` or ``prefill,decode`` -> phases in the given order, each once."""
    out: list[Phase] = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        try:
            phase = Phase(part)
        except ValueError:
            raise PhaseprofError(f"bad --phase {part!r}: use prefill, decode or prefill,decode") from None
        if phase not in out:
            out.append(phase)
    if not out:
        raise PhaseprofError("--phase needs prefill, decode or prefill,decode")
    return out


_ARG_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def parse_engine_arg(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` -> (key, value). VALUE is parsed as JSON when it is valid JSON (numbers, true/false, objects,
    lists, null), else kept as a string. Dashes in KEY become underscores (``max-model-len`` -> ``max_model_len``)."""
    if "=" not in text:
        raise PhaseprofError(f"bad --engine-arg {text!r}: expected KEY=VALUE, e.g. max_model_len=8192")
    key, raw = text.split("=", 1)
    key = key.strip().replace("-", "_")
    if not _ARG_KEY.match(key):
        raise PhaseprofError(f"bad --engine-arg {text!r}: {key!r} is not a vllm.LLM keyword argument name")
    raw = raw.strip()
    try:
        value: Any = json.loads(raw)
    except json.JSONDecodeError:
        lowered = raw.lower()
        value = {"true": True, "false": False, "none": None}.get(lowered, raw)
    return key, value


def parse_engine_args(items: list[str] | None) -> dict[str, Any]:
    """Many ``--engine-arg`` values into one dict; a repeated key keeps its last value."""
    return dict(parse_engine_arg(t) for t in items or [])


_RANGE = re.compile(r"^(\d+):(\d+):(\d+)$")  # start:stop:step, stop included
_GEOM = re.compile(r"^(\d+)\.\.(\d+)x(\d+)$")  # start..stop x factor, stop included when reached


def parse_int_list(spec: str, *, what: str = "tokens") -> list[int]:
    """Parse ``128,256,512``, ``128:8192:128`` (arithmetic, stop included) or ``128..8192x2`` (geometric).

    Parts may be mixed with commas (``1,2,4:16:4``). Returns sorted unique positive integers.
    """
    values: set[int] = set()
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        if m := _RANGE.match(part):
            start, stop, step = map(int, m.groups())
            if step <= 0 or start > stop:
                raise PhaseprofError(f"bad --{what} range {part!r}: need start <= stop and step > 0")
            values.update(range(start, stop + 1, step))
        elif m := _GEOM.match(part):
            start, stop, factor = map(int, m.groups())
            if factor < 2 or start <= 0 or start > stop:
                raise PhaseprofError(f"bad --{what} range {part!r}: need 0 < start <= stop and factor >= 2")
            v = start
            while v <= stop:
                values.add(v)
                v *= factor
        elif part.isdigit():
            values.add(int(part))
        else:
            raise PhaseprofError(
                f"bad --{what} value {part!r}: use a list (128,256), a range (128:8192:128) or doubling (128..8192x2)"
            )
    if not values or min(values) <= 0:
        raise PhaseprofError(f"--{what} needs at least one positive integer, got {spec!r}")
    return sorted(values)
