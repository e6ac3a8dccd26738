"""``phaseprof capture``'s one ``CaptureRequest``: an option given that does not apply to the target is refused
in one line naming it and the target; every option that applies reaches the target's path; run.json's
``command`` parses back into the same request. No engine starts and no request is sent (the servers named are
the discard port, or a local stub answering with a real committed CPU trace)."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
import typer

from phaseprof.capture.server.capture import ServerCapture
from phaseprof.capture.shared.options import Hierarchy, Mode, Phase, Quant
from phaseprof.capture.shared.request import (
    DEFAULT_MAX_TRACE_MB,
    NOT_FOR,
    OPTIONS,
    CaptureRequest,
    InProcess,
    PdServers,
    Server,
)
from phaseprof.capture.shared.trace_file import DEFAULT_MAX_TRACE_BYTES
from phaseprof.commands.capture import capture, request_of
from phaseprof.commands.main import main
from phaseprof.disagg.capture import PdCapture
from phaseprof.errors import PhaseprofError
from tests.capture.test_server_errors import REAL_TRACE, Stub, stub, vllm_like  # noqa: F401 - stub: a fixture

NOBODY = "http://127.0.0.1:9"  # discard port: nothing answers; a capture that reached it would exit 3, not 2
MIB = 1024 * 1024


def parse_request(args: list[str]) -> CaptureRequest:
    """``phaseprof capture ARGS`` parsed as the command parses it (click's parsing, then ``request_of``)."""
    app = typer.Typer()
    app.command("capture")(capture)
    with typer.main.get_command(app).make_context("capture", list(args)) as ctx:
        return request_of(ctx)


def server_args(tmp: Path) -> list[str]:
    return ["--server", NOBODY, "--trace-dir", str(tmp)]


def pd_args(tmp: Path) -> list[str]:
    return [*server_args(tmp), "--decode-server", NOBODY, "--decode-trace-dir", str(tmp)]


def refused(args: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path) -> str:
    """Run ``phaseprof capture ARGS``: it must stop with exit 2 and one line, writing nothing; that line."""
    out = tmp_path / "out"
    assert main(["capture", "--out", str(out), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert not out.exists()
    return err


# --- an option given that does not apply is refused, naming the option and the target -------------------------

ENGINE_OPTIONS = [
    (["--mode", "eager"], "--mode"),
    (["--quant", "fp8"], "--quant"),
    (["--model", "tiny-hybrid"], "--model"),
    (["--engine-arg", "max_num_seqs=4"], "--engine-arg"),
    (["--tensor-parallel-size", "2"], "--tensor-parallel-size"),
    (["-tp", "2"], "--tensor-parallel-size"),
    (["--enable-expert-parallel"], "--enable-expert-parallel"),
    (["--serving-timing"], "--serving-timing"),
    (["--no-serving-timing"], "--no-serving-timing"),
]


@pytest.mark.parametrize(("args", "option"), ENGINE_OPTIONS)
def test_engine_options_are_refused_with_server(args: list[str], option: str, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    err = refused([*server_args(tmp_path), *args], capsys, tmp_path)
    assert f"{option} does not apply with --server: the server's own settings apply (set them where the server " \
           "starts)" in err


@pytest.mark.parametrize(("args", "option", "why"), [
    (["--phase", "decode", "--output-tokens", "4", "--profile-steps", "2"], "--profile-steps",
     "the server's profiler records the whole profiled round"),
    (["--hierarchy", "stack"], "--hierarchy", "the server's --profiler-config decides what its traces record"),
    (["--verbose"], "--verbose", "vLLM's output is the server's own log"),
    (["--decode-trace-dir", "."], "--decode-trace-dir", "it goes with --decode-server"),
    (["--link", "nvlink4"], "--link", "it goes with --decode-server"),
])
def test_profiler_and_pair_options_are_refused_with_server(args: list[str], option: str, why: str, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert f"{option} does not apply with --server: {why}" in refused([*server_args(tmp_path), *args], capsys,
                                                                      tmp_path)


def test_an_option_given_at_its_default_value_is_still_refused(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """Given is what the user typed (click's parameter source), not a value other than the default."""
    assert "--quant does not apply with --server" in refused([*server_args(tmp_path), "--quant", "bf16"], capsys,
                                                             tmp_path)
    assert "--hierarchy does not apply with --server" in refused([*server_args(tmp_path), "--hierarchy", "hooks"],
                                                                 capsys, tmp_path)
    request = parse_request(server_args(tmp_path))  # the same options left at their defaults: a server request
    assert isinstance(request.target, Server)


@pytest.mark.parametrize(("args", "option", "why"), [
    (["--concurrency", "4"], "--concurrency", "it goes with --server"),
    (["--ray", "auto"], "--ray", "it goes with --server (an in-process capture writes its traces on this machine)"),
    (["--trace-dir", "."], "--trace-dir", "it is a --server's torch_profiler_dir"),
    (["--request-timeout", "5"], "--request-timeout", "it goes with --server"),
    (["--trace-wait", "5"], "--trace-wait", "it goes with --server"),
    (["--decode-trace-dir", "."], "--decode-trace-dir", "it goes with --server and --decode-server"),
    (["--link", "nvlink4"], "--link", "it goes with --server and --decode-server"),
])
def test_server_options_are_refused_in_process(args: list[str], option: str, why: str, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(["--model", "tiny-hybrid", *args], capsys, tmp_path)
    assert f"{option} does not apply in-process (without --server): {why}" in err


@pytest.mark.parametrize(("args", "option"), [
    (["--hierarchy", "stack"], "--hierarchy"),
    (["--phase", "decode", "--profile-steps", "2"], "--profile-steps"),
    (["--no-serving-timing"], "--no-serving-timing"),
    (["--max-trace-mb", "1"], "--max-trace-mb"),
    (["--verbose"], "--verbose"),
    (["--concurrency", "2"], "--concurrency"),
])
def test_phaseprof_profiler_options_are_refused_with_tensor_parallel(args: list[str], option: str, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """More than one GPU records with vLLM's own profiler: phaseprof's profiler options mean nothing there."""
    err = refused(["--model", "tiny-hybrid", "--tensor-parallel-size", "2", *args], capsys, tmp_path)
    assert f"{option} does not apply with --tensor-parallel-size > 1: " in err


@pytest.mark.parametrize(("args", "says"), [
    (["--phase", "prefill"], "--phase prefill does not apply with --decode-server: a PD capture times decode"),
    (["--phase", "prefill,decode"], "--phase prefill,decode does not apply with --decode-server"),
    (["--concurrency", "2"], "--concurrency does not apply with --decode-server: a PD capture sends one request "
                             "at a time"),
    (["--ray", "auto"], "--ray does not apply with --decode-server: a PD capture collects both servers' traces"),
    (["--mode", "graph"], "--mode does not apply with --decode-server: the server's own settings apply"),
    (["--quant", "fp8"], "--quant does not apply with --decode-server"),
    (["--model", "tiny-hybrid"], "--model does not apply with --decode-server"),
    (["--engine-arg", "a=1"], "--engine-arg does not apply with --decode-server"),
    (["--profile-steps", "2"], "--profile-steps does not apply with --decode-server"),
    (["--hierarchy", "off"], "--hierarchy does not apply with --decode-server"),
    (["-tp", "2"], "--tensor-parallel-size does not apply with --decode-server"),
    (["--serving-timing"], "--serving-timing does not apply with --decode-server"),
])
def test_options_are_refused_with_decode_server(args: list[str], says: str, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert says in refused([*pd_args(tmp_path), "--output-tokens", "4", *args], capsys, tmp_path)


@pytest.mark.parametrize(("target", "args", "option"), [
    ("in-process", ["--output-tokens", "8"], "--output-tokens"),
    ("in-process", ["--profile-steps", "2"], "--profile-steps"),
    ("server", ["--output-tokens", "8"], "--output-tokens"),  # --profile-steps: refused as a server option above
])
def test_decode_options_are_refused_for_prefill(target: str, args: list[str], option: str, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """A prefill request generates one token: --output-tokens and --profile-steps would be silently dropped."""
    base = ["--model", "tiny-hybrid"] if target == "in-process" else server_args(tmp_path)
    assert f"{option} does not apply with --phase prefill" in refused([*base, "--phase", "prefill", *args], capsys,
                                                                      tmp_path)


def test_every_refusal_names_an_option_of_the_command() -> None:
    """The table of what does not apply where speaks of the command's own options only."""
    for where, table in NOT_FOR.items():
        assert set(table) <= set(OPTIONS), where


# --- what applies reaches the target's path --------------------------------------------------------------------

def test_max_trace_mb_reaches_the_server_capture(tmp_path: Path) -> None:
    req = parse_request([*server_args(tmp_path), "--max-trace-mb", "2"])
    assert ServerCapture.of(req).max_trace_bytes == 2 * MIB
    assert ServerCapture.of(parse_request(server_args(tmp_path))).max_trace_bytes == DEFAULT_MAX_TRACE_BYTES


def test_max_trace_mb_reaches_the_pd_capture(tmp_path: Path) -> None:
    req = parse_request([*pd_args(tmp_path), "--max-trace-mb", "0.5"])
    assert PdCapture.of(req).max_trace_bytes == MIB // 2


def test_default_trace_limit_is_the_committed_trace_limit() -> None:
    assert int(DEFAULT_MAX_TRACE_MB * MIB) == DEFAULT_MAX_TRACE_BYTES


def test_server_options_reach_the_server_capture(tmp_path: Path) -> None:
    req = parse_request([*server_args(tmp_path), "--phase", "decode", "--tokens", "64", "--output-tokens", "9",
                         "--concurrency", "3", "--request-timeout", "7", "--trace-wait", "11", "--reps", "4",
                         "--warmup", "0", "--seed", "5", "--out", str(tmp_path / "o"), "--ray", "10.0.0.1:6379"])
    sc = ServerCapture.of(req)
    c = sc.capture
    assert (c.phase, c.prompt_tokens, c.output_tokens, c.concurrency) == (Phase.DECODE, 64, 9, 3)
    assert (c.reps, c.warmup, c.seed, c.out) == (4, 0, 5, tmp_path / "o")
    assert sc.server.url == NOBODY and sc.server.timeout_s == 7.0 and sc.trace_wait_s == 11.0
    assert sc.trace_dir == tmp_path and sc.ray == "10.0.0.1:6379"


def test_pd_options_reach_the_pd_capture(tmp_path: Path) -> None:
    other = tmp_path / "d"
    req = parse_request(["--server", NOBODY, "--trace-dir", str(tmp_path), "--decode-server", "http://127.0.0.1:8",
                         "--decode-trace-dir", str(other), "--link", "pcie5", "--tokens", "32", "--output-tokens", "4",
                         "--request-timeout", "9", "--trace-wait", "3", "--phase", "decode"])
    pd = PdCapture.of(req)
    assert (pd.prefill.url, pd.decode.url, pd.prefill.timeout_s, pd.decode.timeout_s) == (
        NOBODY, "http://127.0.0.1:8", 9.0, 9.0)
    assert (pd.prefill_trace_dir, pd.decode_trace_dir, pd.link, pd.trace_wait_s) == (tmp_path, other, "pcie5", 3.0)
    assert (pd.capture.phase, pd.capture.prompt_tokens, pd.capture.output_tokens) == (Phase.DECODE, 32, 4)


def test_in_process_options_reach_the_engine_and_the_points() -> None:
    req = parse_request(["--model", "tiny-hybrid", "--mode", "graph", "--quant", "fp8", "--phase", "prefill,decode",
                         "--tokens", "16,32", "--output-tokens", "8", "--profile-steps", "2", "--hierarchy", "stack",
                         "--engine-arg", "max_num_seqs=4", "--engine-arg", "max-model-len=64", "--no-serving-timing",
                         "--max-trace-mb", "3", "--verbose"])
    assert isinstance(req.target, InProcess) and req.target.serving_timing is False
    eng = req.engine_options(cuda=False)
    assert (eng.model, eng.mode, eng.quant, eng.verbose) == ("tiny-hybrid", Mode.GRAPH, Quant.FP8, True)
    assert eng.engine_args == {"max_num_seqs": 4, "max_model_len": 64}
    assert (eng.max_prompt_tokens, eng.max_output_tokens) == (32, 8)  # sized for the largest request
    pts = req.points()
    assert [(p.phase, p.prompt_tokens) for p in pts] == [(Phase.PREFILL, 16), (Phase.PREFILL, 32),
                                                          (Phase.DECODE, 16), (Phase.DECODE, 32)]
    assert {(p.hierarchy, p.profile_decode_steps) for p in pts} == {(Hierarchy.STACK, 2)}
    assert [p.output_tokens for p in pts] == [1, 1, 8, 8]  # prefill generates one token
    assert req.max_trace_bytes == 3 * MIB
    assert parse_request(["--model", "tiny-hybrid"]).engine_options(cuda=True).mode is Mode.GRAPH  # the default


# --- checks of values, before anything starts -------------------------------------------------------------------

@pytest.mark.parametrize(("args", "says"), [
    (["--reps", "0"], "--reps must be at least 1, got 0"),
    (["--phase", "decode", "--output-tokens", "0"], "--output-tokens must be at least 1, got 0"),
    (["--phase", "decode", "--profile-steps", "0"], "--profile-steps must be at least 1, got 0"),
    (["--tensor-parallel-size", "0"], "--tensor-parallel-size must be at least 1, got 0"),
    (["--tensor-parallel-size", "0", "--verbose"], "--tensor-parallel-size must be at least 1, got 0"),
    (["--enable-expert-parallel"], "--enable-expert-parallel needs --tensor-parallel-size of at least 2"),
    (["-tp", "2", "--tokens", "16,32"], "--tensor-parallel-size captures one --phase and one --tokens"),
    (["--max-trace-mb", "nan"], "--max-trace-mb must be more than 0 and at most 4096, got nan"),
    (["--engine-arg", "max_model_len"], "bad --engine-arg 'max_model_len': expected KEY=VALUE"),
])
def test_bad_in_process_values(args: list[str], says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert says in refused(["--model", "tiny-hybrid", *args], capsys, tmp_path)


@pytest.mark.parametrize(("args", "says"), [
    (["--phase", "prefill,decode"], "--server takes one --phase and one --tokens value"),
    (["--reps", "0"], "--reps must be at least 1, got 0"),
    (["--request-timeout", "inf"], "--request-timeout must be more than 0 and at most 604800 seconds, got inf"),
    (["--trace-wait", "-1"], "--trace-wait must be more than 0 seconds, got -1.0"),
    (["--max-trace-mb", "5000"], "--max-trace-mb must be more than 0 and at most 4096, got 5000.0"),
    (["--ray", "nope"], "--ray 'nope': expected 'auto', 'local' or HOST:PORT"),
])
def test_bad_server_values(args: list[str], says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert says in refused([*server_args(tmp_path), *args], capsys, tmp_path)


def test_decode_server_needs_the_prefill_server_first(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The target's own shape is checked before any option is judged against it."""
    err = refused(["--decode-server", NOBODY, "--mode", "eager"], capsys, tmp_path)
    assert "--decode-server goes with --server (the prefill server) and one --tokens value" in err


# --- run.json's command reproduces the run ---------------------------------------------------------------------

ROUND_TRIPS = {
    "in-process": ["--model", "tiny-hybrid", "--phase", "decode", "--tokens", "16", "--output-tokens", "8",
                   "--mode", "eager", "--quant", "fp8", "--reps", "3", "--warmup", "-1", "--engine-arg",
                   "compilation_config={\"level\": 0}", "--engine-arg", "max_num_seqs=4", "--profile-steps", "2",
                   "--max-trace-mb", "1.5", "--seed", "7", "--hierarchy", "off", "--no-serving-timing", "-v"],
    "in-process-defaults": [],
    "tensor-parallel": ["--model", "tiny-hybrid", "-tp", "2", "--enable-expert-parallel", "--tokens", "64"],
    "server": ["--server", NOBODY, "--trace-dir", "traces here", "--phase", "decode", "--tokens", "64",
               "--output-tokens", "4", "--concurrency", "2", "--request-timeout", "30", "--trace-wait", "5",
               "--ray", "[::1]:6379", "--max-trace-mb", "2", "--out", "o"],
    "server-prefill": ["--server", NOBODY, "--trace-dir", "."],
    "pd": ["--server", NOBODY, "--trace-dir", "p", "--decode-server", "http://127.0.0.1:8",
           "--decode-trace-dir", "d", "--tokens", "128", "--output-tokens", "16", "--link", "pcie5"],
}


@pytest.mark.parametrize("name", sorted(ROUND_TRIPS))
def test_the_command_parses_back_into_the_same_request(name: str) -> None:
    request = parse_request(ROUND_TRIPS[name])
    command = request.command()
    assert command[:2] == ["phaseprof", "capture"]
    assert parse_request(command[2:]) == request
    # only options that apply, each once with its value (--engine-arg repeats, one per KEY=VALUE)
    flags = [a for a in command[2:] if a.startswith("-") and not a.lstrip("-").isdigit()]
    assert len(flags) == len(set(flags)) + max(0, command.count("--engine-arg") - 1)
    for where, table in NOT_FOR.items():
        if where == request.where:
            assert not {f"--{n.replace('_', '-')}" for n in table} & set(flags), (where, flags)


@pytest.mark.parametrize("cuda, model, mode", [(True, "qwen3.5-35b-a3b", Mode.GRAPH),
                                             (False, "tiny-hybrid", Mode.EAGER)])
def test_the_recorded_command_names_the_devices_defaults(cuda: bool, model: str, mode: Mode) -> None:
    """Without --model and --mode the device decides them; run.json's command names what it decided, so the same
    command on another machine starts the same engine (and reads back as the request with them given)."""
    recorded = parse_request([]).on_device(cuda=cuda, default_model=model)
    command = recorded.command()
    assert command[command.index("--model") + 1] == model and command[command.index("--mode") + 1] == str(mode)
    assert parse_request(command[2:]) == recorded


def test_given_model_and_mode_win_over_the_devices_defaults() -> None:
    given = parse_request(["--model", "tiny-moe", "--mode", "eager"])
    assert given.on_device(cuda=True, default_model="qwen3.5-35b-a3b") == given
    server = parse_request(["--server", NOBODY, "--trace-dir", "."])
    assert server.on_device(cuda=True, default_model="qwen3.5-35b-a3b") == server  # a server's settings are its own


def test_each_run_directory_gets_its_own_combination() -> None:
    request = parse_request(["--model", "tiny-hybrid", "--phase", "prefill,decode", "--tokens", "16,32"])
    for phase in (Phase.PREFILL, Phase.DECODE):
        for n in (16, 32):
            back = parse_request(request.command(phase=phase, tokens=n)[2:])
            assert back == request.narrowed(phase, n)
            assert back.workload.phase == (phase,) and back.workload.tokens == (n,)


def test_prefill_command_leaves_decode_options_out() -> None:
    """A prefill request's command has no --output-tokens (it would be refused when read back)."""
    command = parse_request(["--model", "tiny-hybrid", "--phase", "prefill"]).command()
    assert "--output-tokens" not in command and "--profile-steps" not in command
    assert "--output-tokens" in parse_request(["--model", "tiny-hybrid", "--phase", "decode"]).command()


def test_pd_command_says_decode() -> None:
    req = parse_request(["--server", NOBODY, "--trace-dir", ".", "--decode-server", NOBODY,
                         "--decode-trace-dir", "."])
    assert isinstance(req.target, PdServers) and req.workload.phase == (Phase.DECODE,)
    cmd = req.command()
    assert cmd[cmd.index("--phase") + 1] == "decode" and "--concurrency" not in cmd and "--ray" not in cmd


def test_from_cli_refuses_without_click() -> None:
    """The request's checks are its own: the same refusal from the parsed values alone."""
    base = {name: None for name in OPTIONS} | {
        "phase": "prefill", "tokens": "16", "output_tokens": 32, "quant": Quant.BF16, "reps": 1, "warmup": 0,
        "engine_arg": [], "out": Path("runs"), "max_trace_mb": 5.0, "seed": 0, "hierarchy": Hierarchy.HOOKS,
        "serving_timing": True, "verbose": False, "tensor_parallel_size": 1, "enable_expert_parallel": False,
        "concurrency": 1, "request_timeout": 600.0, "trace_wait": 120.0, "link": "nvlink4"}
    assert isinstance(CaptureRequest.from_cli(base, frozenset()).target, InProcess)
    with pytest.raises(PhaseprofError, match="^--link does not apply in-process"):
        CaptureRequest.from_cli(base, frozenset({"link"}))


def test_server_run_json_command_reproduces_the_run(stub: Stub, tmp_path: Path) -> None:  # noqa: F811
    """A whole ``capture --server`` against the stub (its trace: a real committed CPU capture): run.json's
    command parses back into the request of the command line that made it, and --max-trace-mb was applied."""
    traces = tmp_path / "traces"
    traces.mkdir()

    def stop() -> tuple[int, bytes]:
        shutil.copy(REAL_TRACE, traces / f"dp0_pp0_tp0_dcp0_ep0_rank0.{time.time_ns()}.pt.trace.json.gz")
        return 200, b""

    stub.routes = vllm_like(["/start_profile", "/stop_profile"], **{"POST /start_profile": (200, b""),
                                                                    "POST /stop_profile": stop})
    args = ["--server", stub.url, "--trace-dir", str(traces), "--tokens", "16", "--reps", "1", "--warmup", "0",
            "--out", str(tmp_path / "runs"), "--max-trace-mb", "1", "--trace-wait", "5"]
    assert main(["capture", *args]) == 0
    run = json.loads((next((tmp_path / "runs").iterdir()) / "run.json").read_text())
    assert parse_request(run["command"][2:]) == parse_request(args)
    assert run["trace"]["max_bytes"] == MIB
