"""The ``--server`` branches of ``phaseprof capture`` and ``phaseprof sweep`` (kept out of cli.py)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from phaseprof.capture.options import Phase, parse_int_list
from phaseprof.errors import PhaseprofError

TRACE_DIR_HELP = ("With --server: the server's torch_profiler_dir as seen from this machine; the new rank traces "
                  "are collected from it.")
SERVER_HELP = ("Capture from a running vLLM server (http://HOST:PORT) instead of starting an engine; the server "
               "must run with --profiler-config '{\"profiler\": \"torch\", \"torch_profiler_dir\": DIR}'.")


#: In-process options that mean nothing for a server capture (the server's own settings apply instead).
_ENGINE_ONLY = {"--mode", "--quant", "--tensor-parallel-size", "--model", "--engine-arg", "--profile-steps"}


def server_argv(argv: list[str], *, phase: Phase) -> list[str]:
    """The canonical command without the in-process engine's options (and --output-tokens for prefill)."""
    drop = _ENGINE_ONLY | ({"--output-tokens"} if phase is Phase.PREFILL else set())
    out: list[str] = []
    skip = False
    for i, a in enumerate(argv):
        if skip:
            skip = False
            continue
        if a in drop:
            skip = i + 1 < len(argv) and not argv[i + 1].startswith("--")
            continue
        out.append(a)
    return out


def capture_server(*, server: str, trace_dir: Path | None, phase: Phase, tokens: int, output_tokens: int,
                   concurrency: int, reps: int, warmup: int, seed: int, out: Path, timeout_s: float,
                   console: Console, argv: list[str]) -> None:
    """``phaseprof capture --server``: check, time, profile, collect, analyse, print."""
    from phaseprof.capture.server import ServerCapture, capture_from_server, print_server_headline  # noqa: PLC0415

    if trace_dir is None:
        raise PhaseprofError("--server needs --trace-dir (the server's torch_profiler_dir, as seen from here)")
    if phase is Phase.DECODE and output_tokens < 2:
        raise PhaseprofError("--phase decode needs --output-tokens of at least 2 (TPOT is the time per token after "
                             "the first)")
    if concurrency < 1:
        raise PhaseprofError(f"--concurrency must be at least 1, got {concurrency}")
    req = ServerCapture(server=server, trace_dir=trace_dir, phase=phase, tokens=tokens,
                        output_tokens=output_tokens if phase is Phase.DECODE else 1, concurrency=concurrency,
                        reps=reps, warmup=max(warmup, 0), seed=seed, out=out, timeout_s=timeout_s)
    res = capture_from_server(req, console=console, argv=server_argv(argv, phase=phase))
    print_server_headline(res, console)
    if len(res.breakdowns) == 1:
        from phaseprof.capture.rundir import print_table  # noqa: PLC0415

        print_table(next(iter(res.breakdowns.values())), console)


def sweep_server(*, server: str, phase: Phase, tokens: str | None, concurrency: str, output_tokens: int,
                 reps: int, warmup: int, seed: int, out: Path, timeout_s: float, console: Console,
                 argv: list[str]) -> None:
    """``phaseprof sweep --server``: TTFT per length or TPOT per concurrency against the live server."""
    from phaseprof.capture.server_sweep import ServerSweep, run_server_sweep  # noqa: PLC0415
    from phaseprof.capture.sweep_dir import print_sweep  # noqa: PLC0415

    if phase is Phase.PREFILL:
        req = ServerSweep(server=server, phase=phase, lengths=tuple(parse_int_list(tokens or "128..8192x2")),
                          reps=reps, warmup=max(warmup, 0), seed=seed, out=out, timeout_s=timeout_s)
    else:
        prompt = parse_int_list(tokens or "128")
        if len(prompt) != 1:
            raise PhaseprofError("a decode sweep takes one prompt length in --tokens (it sweeps --concurrency)")
        if output_tokens < 2:
            raise PhaseprofError("a decode sweep needs --output-tokens of at least 2")
        req = ServerSweep(server=server, phase=phase, concurrency=tuple(parse_int_list(concurrency,
                                                                                       what="concurrency")),
                          prompt_tokens=prompt[0], output_tokens=output_tokens, reps=reps, warmup=max(warmup, 0),
                          seed=seed, out=out, timeout_s=timeout_s)
    directory, doc = run_server_sweep(req, console=console, argv=argv)
    print_sweep(doc, console)
    if doc.get("slope_us_per_token") is not None:
        console.print(f"slope {doc['slope_us_per_token']:.2f} µs per prompt token (least squares)")
    console.print(f"sweep directory: {directory}")
