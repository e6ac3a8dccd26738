"""``phaseprof capture`` and ``phaseprof sweep``: real vLLM runs, timed cleanly, then profiled.

vllm and torch are imported only inside the commands (``phaseprof --help`` stays fast without them).
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from phaseprof.capture.options import (
    CaptureOptions,
    EngineOptions,
    Mode,
    Phase,
    Quant,
    parse_engine_args,
    parse_int_list,
)
from phaseprof.capture.server_cli import SERVER_HELP, TRACE_DIR_HELP, capture_server, sweep_server
from phaseprof.errors import PhaseprofError

_MODEL_HELP = ("A preset name (see `phaseprof capture --list-presets`), a local Hugging Face model directory, or a "
               "repo id. Default: qwen3.5-35b-a3b with CUDA, else tiny-hybrid (CPU).")
_ENGINE_ARG_HELP = ("KEY=VALUE passed to vllm.LLM (VALUE parsed as JSON when possible), e.g. "
                    "gpu_memory_utilization=0.9 or compilation_config='{\"cudagraph_capture_sizes\":[1,2,4]}'. "
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


def _positive(name: str, value: int) -> int:
    if value < 1:
        raise PhaseprofError(f"--{name} must be at least 1, got {value}")
    return value


def _capture_parallel(opts, cap, tp: int, ep: bool, console: Console, argv: list[str]) -> None:  # noqa: ANN001
    from phaseprof.analysis.ranks import analyze_ranks, find_trace_files  # noqa: PLC0415
    from phaseprof.capture.multi_gpu import capture_parallel  # noqa: PLC0415
    from phaseprof.report.json_io import write_breakdown  # noqa: PLC0415
    from phaseprof.report.table import print_rank_summary  # noqa: PLC0415

    if tp == 1 and ep:
        raise PhaseprofError("--enable-expert-parallel needs --tensor-parallel-size of at least 2")
    console.print(f"profiler: vLLM's own (profiler_config), one trace per rank; {tp} GPUs")
    run_dir = capture_parallel(opts, cap, tp=tp, ep=ep, console=console, argv=argv)
    summary = analyze_ranks(find_trace_files(run_dir / "ranks"))
    for r, bd in summary.ranks.items():
        write_breakdown(bd, run_dir / f"rank{r}.breakdown.json")
    print_rank_summary(summary, console)
    console.print(f"run directory: {run_dir}")


def capture(
    ctx: typer.Context,
    phase: Phase = typer.Option(Phase.PREFILL, "--phase", help="prefill: time TTFT; decode: time TPOT."),
    tokens: int = typer.Option(4096, "--tokens", help="Prompt length in tokens (random ids, seeded)."),
    output_tokens: int = typer.Option(32, "--output-tokens", help="Decode only: tokens generated per request."),
    model: str | None = typer.Option(None, "--model", help=_MODEL_HELP),
    mode: Mode = typer.Option(Mode.EAGER, "--mode", help="eager: enforce_eager; graph: torch.compile + CUDA graphs."),
    quant: Quant = typer.Option(Quant.BF16, "--quant", help="bf16 weights, or vLLM's online fp8."),
    reps: int = typer.Option(5, "--reps", help="Timed (unprofiled) requests; median, p10 and p90 are reported."),
    warmup: int = typer.Option(2, "--warmup", help="Untimed requests first (JIT, autotuning, caches)."),
    engine_arg: list[str] = typer.Option([], "--engine-arg", help=_ENGINE_ARG_HELP),
    out: Path = typer.Option(Path("runs"), "--out", help="Parent directory of the run directory."),
    profile_steps: int | None = typer.Option(None, "--profile-steps", help="Decode only: profile just the first N "
                                             "decode steps (smaller trace); the request still runs to the end."),
    seed: int = typer.Option(0, "--seed", help="Seed of the random prompt."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show vLLM's own log while it runs."),
    list_presets: bool = typer.Option(False, "--list-presets", help="List the built-in presets and exit."),
    tensor_parallel_size: int = typer.Option(1, "--tensor-parallel-size", "-tp", help="GPUs of this host for "
                                             "tensor parallelism; > 1 records one trace per rank with vLLM's "
                                             "own profiler (workers are separate processes)."),
    enable_expert_parallel: bool = typer.Option(False, "--enable-expert-parallel", help="Expert parallelism "
                                                "across the tensor-parallel GPUs (MoE models)."),
    server: str | None = typer.Option(None, "--server", help=SERVER_HELP),
    trace_dir: Path | None = typer.Option(None, "--trace-dir", help=TRACE_DIR_HELP),
    concurrency: int = typer.Option(1, "--concurrency", help="With --server: requests sent at once per round."),
    request_timeout: float = typer.Option(600.0, "--request-timeout", help="With --server: seconds any one "
                                          "HTTP request may take."),
) -> None:
    """Start vLLM in-process (or use a running server), time one phase without the profiler, profile it once,
    write a run directory."""
    console = Console()
    if list_presets:
        _print_presets(console)
        return
    if server is not None:
        _positive("tokens", tokens)
        _positive("reps", reps)
        capture_server(server=server, trace_dir=trace_dir, phase=phase, tokens=tokens, output_tokens=output_tokens,
                       concurrency=concurrency, reps=reps, warmup=warmup, seed=seed, out=out,
                       timeout_s=request_timeout, console=console, argv=canonical_command(ctx))
        return
    _positive("tokens", tokens)
    _positive("reps", reps)
    if phase is Phase.DECODE:
        _positive("output-tokens", output_tokens)
    if profile_steps is not None:
        _positive("profile-steps", profile_steps)
    n_out = output_tokens if phase is Phase.DECODE else 1
    engine_opts = EngineOptions(model=model, mode=mode, quant=quant, max_prompt_tokens=tokens,
                                max_output_tokens=n_out, max_num_seqs=2,
                                engine_args=parse_engine_args(engine_arg), verbose=verbose)
    cap = CaptureOptions(phase=phase, tokens=tokens, output_tokens=n_out, reps=reps, warmup=max(warmup, 0),
                         seed=seed, profile_decode_steps=profile_steps, out=out)
    if tensor_parallel_size != 1 or enable_expert_parallel:
        _capture_parallel(engine_opts, cap, tensor_parallel_size, enable_expert_parallel, console,
                          canonical_command(ctx))
        return
    from phaseprof.capture.engine import explain_engine_error  # noqa: PLC0415
    from phaseprof.capture.rundir import print_table  # noqa: PLC0415
    from phaseprof.capture.runner import capture_phase, open_session, print_headline  # noqa: PLC0415

    session = open_session(engine_opts, console=console)
    try:
        result = capture_phase(session, cap, console=console, argv=canonical_command(ctx))
    except PhaseprofError:
        raise
    except Exception as e:  # noqa: BLE001 - one line, never a traceback
        if verbose:
            console.print_exception()
        raise explain_engine_error(e, session.plan) from e
    finally:
        session.close()
    print_headline(result, console)
    if result.breakdown is not None:
        print_table(result.breakdown, console)


def _show_sweeps(paths: list[Path], console: Console) -> None:
    from phaseprof.capture.sweep_dir import print_sweep  # noqa: PLC0415
    from phaseprof.records import SweepRecord  # noqa: PLC0415

    for p in paths:
        f = p / "sweep.json" if p.is_dir() else p
        doc = SweepRecord.read(f).to_dict()  # the one reader of sweep.json (PhaseprofError naming the file)
        console.print(f"[dim]{f}[/] ({doc.get('engine', {}).get('mode', '?')} mode, reps {doc.get('reps')})")
        print_sweep(doc, console)
        if doc.get("slope_us_per_token") is not None:
            console.print(f"slope {doc['slope_us_per_token']:.2f} µs per prompt token (least squares)")
        from phaseprof.sol.sweep import print_sweep_sol  # noqa: PLC0415

        print_sweep_sol(doc, console, source=f)


def sweep(
    ctx: typer.Context,
    phase: Phase = typer.Option(Phase.PREFILL, "--phase", help="prefill: TTFT per length; decode: TPOT per "
                                "concurrency."),
    tokens: str | None = typer.Option(None, "--tokens", help="Prefill: prompt lengths, a list (128,256), a range "
                                      "(128:8192:128) or doubling (128..8192x2; the default). Decode: one prompt "
                                      "length (default 128)."),
    concurrency: str = typer.Option("1,2,4,8,16", "--concurrency", help="Decode: concurrent requests per point."),
    output_tokens: int = typer.Option(128, "--output-tokens", help="Decode: tokens generated per request."),
    profile_at: str | None = typer.Option(None, "--profile-at", help="Prefill: also capture profiled breakdowns at "
                                          "these lengths, e.g. 512,4096."),
    model: str | None = typer.Option(None, "--model", help=_MODEL_HELP),
    mode: Mode = typer.Option(Mode.EAGER, "--mode", help="eager or graph (torch.compile + CUDA graphs)."),
    quant: Quant = typer.Option(Quant.BF16, "--quant", help="bf16 or fp8."),
    reps: int = typer.Option(5, "--reps", help="Timed requests (rounds, for decode) per point."),
    warmup: int = typer.Option(1, "--warmup", help="Untimed requests per point first."),
    engine_arg: list[str] = typer.Option([], "--engine-arg", help=_ENGINE_ARG_HELP),
    out: Path = typer.Option(Path("runs"), "--out", help="Parent directory of the sweep directory."),
    seed: int = typer.Option(0, "--seed", help="Seed of the random prompts."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show vLLM's own log while it runs."),
    show: list[Path] = typer.Option([], "--show", help="Print the table of existing sweep directories (or "
                                    "sweep.json files) instead of running a sweep. Repeatable."),
    server: str | None = typer.Option(None, "--server", help="Sweep a running vLLM server (http://HOST:PORT) "
                                      "instead of starting an engine (no profiler needed)."),
    request_timeout: float = typer.Option(600.0, "--request-timeout", help="With --server: seconds any one "
                                          "HTTP request may take."),
) -> None:
    """One engine start, many points: the TTFT floor, slope and CUDA-graph steps, or decode scaling."""
    console = Console()
    if show:
        _show_sweeps(show, console)
        return
    _positive("reps", reps)
    if server is not None:
        if profile_at:
            raise PhaseprofError("--profile-at is not available with --server; use `phaseprof capture --server`")
        sweep_server(server=server, phase=phase, tokens=tokens, concurrency=concurrency,
                     output_tokens=output_tokens, reps=reps, warmup=warmup, seed=seed, out=out,
                     timeout_s=request_timeout, console=console, argv=canonical_command(ctx))
        return
    if phase is Phase.PREFILL:
        lengths = parse_int_list(tokens or "128..8192x2", what="tokens")
        prof = parse_int_list(profile_at, what="profile-at") if profile_at else []
        conc: list[int] = []
        max_prompt, max_out, max_seqs = max(lengths + prof), 1, 2
    else:
        if profile_at:
            raise PhaseprofError("--profile-at is for prefill sweeps; use `phaseprof capture --phase decode`")
        prompt_list = parse_int_list(tokens or "128", what="tokens")
        if len(prompt_list) != 1:
            raise PhaseprofError("a decode sweep takes one prompt length in --tokens (it sweeps --concurrency)")
        if output_tokens < 2:
            raise PhaseprofError("a decode sweep needs --output-tokens of at least 2")
        conc = parse_int_list(concurrency, what="concurrency")
        lengths, prof = prompt_list, []
        max_prompt, max_out, max_seqs = prompt_list[0], output_tokens, max(2, max(conc))
    engine_opts = EngineOptions(model=model, mode=mode, quant=quant, max_prompt_tokens=max_prompt,
                                max_output_tokens=max_out, max_num_seqs=max_seqs,
                                engine_args=parse_engine_args(engine_arg), verbose=verbose)
    from phaseprof.capture.engine import explain_engine_error  # noqa: PLC0415
    from phaseprof.capture.runner import open_session  # noqa: PLC0415
    from phaseprof.capture.sweep_dir import SweepRequest, print_sweep, run_sweep  # noqa: PLC0415

    req = SweepRequest(phase=phase, lengths=tuple(lengths), concurrency=tuple(conc), prompt_tokens=max_prompt,
                       output_tokens=output_tokens, reps=reps, warmup=max(warmup, 0), seed=seed,
                       profile_at=tuple(prof), out=out)
    session = open_session(engine_opts, console=console)
    try:
        directory, doc = run_sweep(session, req, console=console, argv=canonical_command(ctx))
    except PhaseprofError:
        raise
    except Exception as e:  # noqa: BLE001
        if verbose:
            console.print_exception()
        raise explain_engine_error(e, session.plan) from e
    finally:
        session.close()
    print_sweep(doc, console)
    if doc.get("slope_us_per_token") is not None:
        console.print(f"slope {doc['slope_us_per_token']:.2f} µs per prompt token (least squares)")
    console.print(f"sweep directory: {directory}")


def _print_presets(console: Console) -> None:
    from rich.table import Table  # noqa: PLC0415

    from phaseprof.presets import list_presets, load_preset  # noqa: PLC0415

    table = Table(title="phaseprof presets (dummy weights)")
    for col in ("name", "architecture", "device", "layers", "notes"):
        table.add_column(col)
    for name in list_presets():
        p = load_preset(name)
        table.add_row(name, p.architecture, p.device, str(p.hf_config.get("num_hidden_layers")),
                      p.notes[:90] + ("…" if len(p.notes) > 90 else ""))
    console.print(table)


def register(app: typer.Typer) -> None:
    """Add ``capture`` and ``sweep`` to the phaseprof CLI."""
    app.command("capture")(capture)
    app.command("sweep")(sweep)
