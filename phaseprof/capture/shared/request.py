"""What ``phaseprof capture`` is asked to do: one frozen, validated ``CaptureRequest``.

It is built once from the parsed command line (``CaptureRequest.from_cli``), which checks every value and refuses
every option given that does not apply to the target (in-process, ``--server``, or a ``--server`` +
``--decode-server`` pair); it is passed whole down the target's path, which takes its ``CaptureOptions`` and
``EngineOptions`` from it; and it writes itself back as run.json's ``command`` (``CaptureRequest.command``): the
canonical ``phaseprof capture`` command line with every option that applies, each with its value.

Fields are named as the options are (``max_trace_mb`` is ``--max-trace-mb``, ``engine_arg`` one ``--engine-arg``
each), so no option changes its name between the command line and the request.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, fields, replace
from enum import Enum
from pathlib import Path
from typing import Any

from phaseprof.capture.shared.options import (
    DEFAULT_HIERARCHY,
    CaptureOptions,
    EngineOptions,
    Hierarchy,
    Mode,
    Phase,
    Quant,
    parse_engine_args,
    parse_int_list,
    parse_phases,
    resolve_mode,
)
from phaseprof.errors import PhaseprofError

#: --max-trace-mb's default: the repository's limit for a committed trace (trace_file.DEFAULT_MAX_TRACE_BYTES;
#: not imported from there: the trace tables it loads would slow ``phaseprof capture --help``).
DEFAULT_MAX_TRACE_MB = 5.0
#: The largest --max-trace-mb taken (the output's gzipped size limit; a committed trace is 5 MB).
MAX_TRACE_MB = 4096.0
#: The longest --request-timeout taken (a week): longer is a typo, and inf/NaN cannot arm a timer.
MAX_REQUEST_TIMEOUT_S = 7 * 24 * 3600.0


def check_request_timeout(timeout_s: float) -> None:
    """--request-timeout is the deadline of each whole HTTP request: more than 0 s, at most a week."""
    if not 0 < timeout_s <= MAX_REQUEST_TIMEOUT_S:  # also NaN and inf
        raise PhaseprofError(f"--request-timeout must be more than 0 and at most {MAX_REQUEST_TIMEOUT_S:g} seconds, "
                             f"got {timeout_s}")


@dataclass(frozen=True)
class Workload:
    """What is timed and profiled: each ``phase`` at each prompt length of ``tokens`` (decode generates
    ``output_tokens``), ``warmup`` untimed then ``reps`` timed requests, prompts seeded with ``seed``."""

    phase: tuple[Phase, ...]
    tokens: tuple[int, ...]
    output_tokens: int
    reps: int
    warmup: int
    seed: int


@dataclass(frozen=True)
class Output:
    """Where the run directories go (``out``) and the size limit of each ``trace.json.gz`` (``max_trace_mb``)."""

    out: Path
    max_trace_mb: float


@dataclass(frozen=True)
class InProcess:
    """The target that starts vLLM here: the engine's options; ``tensor_parallel_size`` > 1 runs vLLM's own
    per-rank profiler instead of phaseprof's (``parallel``)."""

    model: str | None
    mode: Mode | None
    quant: Quant
    engine_arg: tuple[str, ...]
    profile_steps: int | None
    hierarchy: Hierarchy
    serving_timing: bool
    verbose: bool
    tensor_parallel_size: int
    enable_expert_parallel: bool

    @property
    def parallel(self) -> bool:
        """Several GPUs: one trace per rank from vLLM's own profiler (``capture.inprocess.multi_gpu``)."""
        return self.tensor_parallel_size > 1 or self.enable_expert_parallel


@dataclass(frozen=True)
class Server:
    """The target that is a running vLLM server: its URL, its torch_profiler_dir as seen from here, requests at
    once per round, each HTTP request's deadline, the wait for its traces, and a Ray cluster to collect from."""

    server: str
    trace_dir: Path
    concurrency: int
    request_timeout: float
    trace_wait: float
    ray: str | None


@dataclass(frozen=True)
class PdServers:
    """The target that is a disaggregated pair: the prefill ``server`` and the ``decode_server``, each with its
    torch_profiler_dir as seen from here, and the catalogue ``link`` the handoff is modelled on."""

    server: str
    trace_dir: Path
    decode_server: str
    decode_trace_dir: Path
    link: str
    request_timeout: float
    trace_wait: float


Target = InProcess | Server | PdServers

#: Every option of ``phaseprof capture`` a request holds, in the order the command line lists them.
OPTIONS = ("phase", "tokens", "output_tokens", "model", "mode", "quant", "reps", "warmup", "engine_arg", "out",
           "profile_steps", "max_trace_mb", "seed", "hierarchy", "serving_timing", "verbose", "tensor_parallel_size",
           "enable_expert_parallel", "server", "trace_dir", "concurrency", "request_timeout", "trace_wait", "ray",
           "decode_server", "decode_trace_dir", "link")

SERVER_SETTINGS = "the server's own settings apply (set them where the server starts)"
_WITH_SERVER = "it goes with --server"
_WITH_PD = "it goes with --server and --decode-server"
_ENGINE = ("model", "mode", "quant", "engine_arg", "tensor_parallel_size", "enable_expert_parallel",
           "serving_timing")
_NOT_SERVERS = {  # what neither a server nor a PD pair takes
    **dict.fromkeys(_ENGINE, SERVER_SETTINGS),
    "hierarchy": "the server's --profiler-config decides what its traces record",
    "profile_steps": "the server's profiler records the whole profiled round",
    "verbose": "vLLM's output is the server's own log",
}
_NOT_IN_PROCESS = {
    "trace_dir": "it is a --server's torch_profiler_dir (an in-process capture writes its own trace)",
    "concurrency": _WITH_SERVER, "request_timeout": _WITH_SERVER, "trace_wait": _WITH_SERVER,
    "ray": "it goes with --server (an in-process capture writes its traces on this machine)",
    "decode_trace_dir": _WITH_PD, "link": _WITH_PD,
}
#: Options that do not apply to a target, each with why: where ``from_cli`` refuses them and ``command`` leaves
#: them out. The targets' own fields (--server, --decode-server) choose the target and are not listed.
NOT_FOR: dict[str, dict[str, str]] = {
    "in-process (without --server)": _NOT_IN_PROCESS,
    "with --tensor-parallel-size > 1": {
        **_NOT_IN_PROCESS,
        "hierarchy": "vLLM's own profiler records each rank (no module scopes)",
        "profile_steps": "vLLM's own profiler records the whole profiled request",
        "serving_timing": "one engine is timed and profiled",
        "max_trace_mb": "the ranks' traces are vLLM's own, kept whole",
        "verbose": "vLLM's output is shown as it runs",
    },
    "with --server": {**_NOT_SERVERS, "decode_trace_dir": "it goes with --decode-server",
                      "link": "it goes with --decode-server"},
    "with --decode-server": {
        **_NOT_SERVERS,
        "concurrency": "a PD capture sends one request at a time, as vLLM's PD proxy does",
        "ray": "a PD capture collects both servers' traces on this machine",
    },
}
#: Options of decode alone, left out (refused when given) when no --phase is decode.
DECODE_ONLY = {"output_tokens": "a prefill request generates one token",
               "profile_steps": "it limits the profiled decode steps"}


def flag(name: str, value: Any = None) -> str:  # noqa: ANN401 - any option's value
    """The command-line spelling of option ``name`` (``--no-serving-timing`` for ``serving_timing=False``)."""
    if name == "serving_timing" and value is False:
        return "--no-serving-timing"
    return "--" + name.replace("_", "-")


def at_least(name: str, value: int, least: int = 1) -> None:
    """Option ``name``'s value is at least ``least``; else one line naming the option."""
    if value < least:
        raise PhaseprofError(f"{flag(name)} must be at least {least}, got {value}")


def _check_trace_mb(value: float) -> None:
    if not 0 < value <= MAX_TRACE_MB:  # also NaN and inf
        raise PhaseprofError(f"--max-trace-mb must be more than 0 and at most {MAX_TRACE_MB:g}, got {value}")


def _check_trace_wait(value: float) -> None:
    if not value > 0:  # also NaN
        raise PhaseprofError(f"--trace-wait must be more than 0 seconds, got {value}")


def _where(params: Mapping[str, Any]) -> str:
    """The target the options choose, as ``NOT_FOR`` names it (after ``--decode-server``'s own check)."""
    if params["decode_server"] is not None:
        return "with --decode-server"
    if params["server"] is not None:
        return "with --server"
    at_least("tensor_parallel_size", params["tensor_parallel_size"])  # before it chooses the target
    if params["tensor_parallel_size"] > 1 or params["enable_expert_parallel"]:
        return "with --tensor-parallel-size > 1"
    return "in-process (without --server)"


def refuse_given(params: Mapping[str, Any], given: Set[str], rules: Sequence[tuple[str, Mapping[str, str]]]) -> None:
    """One line naming the first option of ``params`` (in their order) that the user gave and a rule's table
    lists: ``rules`` are (where, {option: why it does not apply there}). Capture and sweep refuse with it."""
    for name in params:
        if name in given:
            for where, table in rules:
                if name in table:
                    raise PhaseprofError(f"{flag(name, params[name])} does not apply {where}: {table[name]}")


def _refuse_unused(params: Mapping[str, Any], given: Set[str], where: str, phases: list[Phase]) -> None:
    """One line naming the first option given that does not apply to the target (or to a prefill), and why."""
    rules = [(where, NOT_FOR[where])] + ([] if Phase.DECODE in phases else [("with --phase prefill", DECODE_ONLY)])
    refuse_given({name: params[name] for name in OPTIONS}, given, rules)


def _in_process(params: Mapping[str, Any], phases: list[Phase], lengths: list[int]) -> InProcess:
    if Phase.DECODE in phases:
        at_least("output_tokens", params["output_tokens"])
    if params["profile_steps"] is not None:
        at_least("profile_steps", params["profile_steps"])
    _check_trace_mb(params["max_trace_mb"])
    parse_engine_args(params["engine_arg"])  # a malformed KEY=VALUE fails here, before vLLM is imported
    target = InProcess(**{f.name: params[f.name] for f in fields(InProcess)} | {
        "engine_arg": tuple(params["engine_arg"])})
    if target.enable_expert_parallel and target.tensor_parallel_size == 1:
        raise PhaseprofError("--enable-expert-parallel needs --tensor-parallel-size of at least 2")
    if target.parallel and len(phases) * len(lengths) > 1:
        raise PhaseprofError("--tensor-parallel-size captures one --phase and one --tokens at a time")
    return target


def _server(params: Mapping[str, Any], phases: list[Phase], lengths: list[int]) -> Server:
    if len(phases) != 1 or len(lengths) != 1:
        raise PhaseprofError("--server takes one --phase and one --tokens value")
    if params["trace_dir"] is None:
        raise PhaseprofError("--server needs --trace-dir (the server's torch_profiler_dir, as seen from here)")
    if phases[0] is Phase.DECODE and params["output_tokens"] < 2:
        raise PhaseprofError("--phase decode needs --output-tokens of at least 2 (TPOT is the time per token after "
                             "the first)")
    at_least("concurrency", params["concurrency"])
    check_request_timeout(params["request_timeout"])
    _check_trace_wait(params["trace_wait"])
    _check_trace_mb(params["max_trace_mb"])
    if params["ray"] is not None:
        from phaseprof.scale.ray_run import check_address  # noqa: PLC0415 - the address only; Ray is not imported

        check_address(params["ray"])
    return Server(**{f.name: params[f.name] for f in fields(Server)})


def _pd_servers(params: Mapping[str, Any]) -> PdServers:
    if params["trace_dir"] is None or params["decode_trace_dir"] is None:
        raise PhaseprofError("--decode-server needs --trace-dir (the prefill server's torch_profiler_dir) and "
                             "--decode-trace-dir (the decode server's), as seen from here")
    if params["output_tokens"] < 2:
        raise PhaseprofError("--decode-server needs --output-tokens of at least 2 (TPOT is the time per token "
                             "after the first)")
    check_request_timeout(params["request_timeout"])
    _check_trace_wait(params["trace_wait"])
    _check_trace_mb(params["max_trace_mb"])
    from phaseprof.sol.links import link_by_name  # noqa: PLC0415 - reads the link catalogue

    link_by_name(params["link"])  # an unknown link fails before any request
    return PdServers(**{f.name: params[f.name] for f in fields(PdServers)})


def _spelled(name: str, value: Any) -> list[str]:  # noqa: ANN401 - any option's value
    """Option ``name`` with ``value`` on a command line (nothing for an unset value or a flag that is off)."""
    if value is None or (value is False and name != "serving_timing"):
        return []
    if isinstance(value, bool):
        return [flag(name, value)]
    if name == "engine_arg":
        return [a for v in value for a in (flag(name), v)]
    if isinstance(value, tuple):
        return [flag(name), ",".join(str(v) for v in value)]
    return [flag(name), str(value.value if isinstance(value, Enum) else value)]


@dataclass(frozen=True)
class CaptureRequest:
    """One ``phaseprof capture``: the ``workload``, its ``output``, and the ``target`` it runs on."""

    workload: Workload
    output: Output
    target: Target

    @classmethod
    def from_cli(cls, params: Mapping[str, Any], given: Set[str]) -> CaptureRequest:
        """The request of the parsed options ``params`` (the command's keyword names, every one present);
        ``given``: the names the user gave (not defaults). Every check of the command is here: one
        PhaseprofError, naming the option, for a bad value or an option given that does not apply."""
        phases = parse_phases(params["phase"])
        lengths = parse_int_list(params["tokens"], what="tokens")
        if params["decode_server"] is not None and (params["server"] is None or len(lengths) != 1):
            raise PhaseprofError("--decode-server goes with --server (the prefill server) and one --tokens value")
        where = _where(params)
        if where == "with --decode-server":
            if "phase" in given and phases != [Phase.DECODE]:
                raise PhaseprofError(f"--phase {params['phase']} does not apply {where}: a PD capture times decode "
                                     "through the pair (TTFT and TPOT)")
            phases = [Phase.DECODE]
        _refuse_unused(params, given, where, phases)
        at_least("reps", params["reps"])
        target: Target
        if where == "with --decode-server":
            target = _pd_servers(params)
        elif where == "with --server":
            target = _server(params, phases, lengths)
        else:
            target = _in_process(params, phases, lengths)
        workload = Workload(phase=tuple(phases), tokens=tuple(lengths), output_tokens=params["output_tokens"],
                            reps=params["reps"], warmup=params["warmup"], seed=params["seed"])
        return cls(workload, Output(out=params["out"], max_trace_mb=params["max_trace_mb"]), target)

    @property
    def where(self) -> str:
        """The target, as ``NOT_FOR`` names it."""
        t = self.target
        if isinstance(t, PdServers):
            return "with --decode-server"
        if isinstance(t, Server):
            return "with --server"
        return "with --tensor-parallel-size > 1" if t.parallel else "in-process (without --server)"

    @property
    def max_trace_bytes(self) -> int:
        """--max-trace-mb in bytes: the size limit of each trace.json.gz written."""
        return int(self.output.max_trace_mb * 1024 * 1024)

    def options(self) -> dict[str, Any]:
        """Every option that applies to this request, with its value (the command's keyword names)."""
        skip = set(NOT_FOR[self.where]) | (set() if Phase.DECODE in self.workload.phase else set(DECODE_ONLY))
        values = {f.name: getattr(part, f.name) for part in (self.workload, self.output, self.target)
                  for f in fields(part)}
        return {name: values[name] for name in OPTIONS if name in values and name not in skip}

    def narrowed(self, phase: Phase, tokens: int) -> CaptureRequest:
        """This request for one phase and one prompt length (what one run directory holds)."""
        return replace(self, workload=replace(self.workload, phase=(phase,), tokens=(tokens,)))

    def on_device(self, *, cuda: bool, default_model: str) -> CaptureRequest:
        """This request with the defaults the device decided written out: ``--model`` (``default_model``, the
        preset used without it) and ``--mode`` (graph with CUDA, eager on CPU), so that run.json's command runs
        the same engine on any machine. Only an in-process target has them; others are returned as they are."""
        t = self.target
        if not isinstance(t, InProcess):
            return self
        return replace(self, target=replace(t, model=t.model or default_model, mode=resolve_mode(t.mode, cuda=cuda)))

    def command(self, *, phase: Phase | None = None, tokens: int | None = None) -> list[str]:
        """The canonical ``phaseprof capture`` command line of this request (run.json's ``command``): every
        option that applies, each with its value; ``phase`` and ``tokens`` narrow it to one run directory's."""
        req = self
        if phase is not None or tokens is not None:
            req = self.narrowed(phase or self.workload.phase[0], tokens or self.workload.tokens[0])
        return ["phaseprof", "capture", *(a for name, v in req.options().items() for a in _spelled(name, v))]

    def capture_options(self, phase: Phase, tokens: int) -> CaptureOptions:
        """One point of the workload as the capture paths take it (``CaptureOptions``)."""
        w, t = self.workload, self.target
        inproc = isinstance(t, InProcess)
        return CaptureOptions.of(phase, tokens, output_tokens=w.output_tokens, reps=w.reps, warmup=w.warmup,
                                 seed=w.seed, out=self.output.out,
                                 profile_decode_steps=t.profile_steps if inproc else None,
                                 hierarchy=t.hierarchy if inproc else DEFAULT_HIERARCHY,
                                 concurrency=t.concurrency if isinstance(t, Server) else 1)

    def points(self) -> list[CaptureOptions]:
        """Every point of the workload: each phase (in the order given) at each prompt length."""
        return [self.capture_options(ph, n) for ph in self.workload.phase for n in self.workload.tokens]

    def engine_options(self, *, cuda: bool) -> EngineOptions:
        """The in-process engine's options, sized for the workload's largest request; ``cuda``: whether the
        engine runs on a CUDA GPU (the default --mode)."""
        t, w = self.target, self.workload
        if not isinstance(t, InProcess):
            raise TypeError(f"engine_options of a request {self.where}")
        return EngineOptions(model=t.model, mode=resolve_mode(t.mode, cuda=cuda), quant=t.quant,
                             max_prompt_tokens=max(w.tokens),
                             max_output_tokens=w.output_tokens if Phase.DECODE in w.phase else 1, max_num_seqs=2,
                             engine_args=parse_engine_args(list(t.engine_arg)), verbose=t.verbose)
