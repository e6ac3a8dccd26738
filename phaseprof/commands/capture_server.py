"""The ``--server`` branches of ``phaseprof capture`` and ``phaseprof sweep`` (kept out of cli.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from phaseprof.capture.shared.options import CaptureOptions, Phase
from phaseprof.errors import PhaseprofError

if TYPE_CHECKING:
    from phaseprof.capture.shared.sweep import SweepSpec

TRACE_DIR_HELP = ("With --server: the server's torch_profiler_dir as seen from this machine; the new rank traces "
                  "are collected from it.")
SERVER_HELP = ("Capture from a running vLLM server (http://HOST:PORT) instead of starting an engine; the server "
               "must run with --profiler-config '{\"profiler\": \"torch\", \"torch_profiler_dir\": DIR}'.")
DECODE_SERVER_HELP = ("A disaggregated capture: --server is the prefill server and this the decode server "
                      "(http://HOST:PORT), both run with the same --kv-transfer-config (NixlConnector) and "
                      "--profiler-config; requests go through both one at a time, as vLLM's PD proxy sends them.")
RAY_HELP = ("With --server: collect the rank traces from --trace-dir on every node of this Ray cluster ('auto', "
            "HOST:PORT); traces on other nodes are analysed there and stay there. $VARS in --trace-dir (quoted) "
            "expand on each node.")


#: The longest --request-timeout taken (a week): longer is a typo, and inf/NaN cannot arm a timer.
MAX_REQUEST_TIMEOUT_S = 7 * 24 * 3600.0


def check_request_timeout(timeout_s: float) -> None:
    """--request-timeout is the deadline of each whole HTTP request: more than 0 s, at most a week."""
    if not 0 < timeout_s <= MAX_REQUEST_TIMEOUT_S:  # also NaN and inf
        raise PhaseprofError(f"--request-timeout must be more than 0 and at most {MAX_REQUEST_TIMEOUT_S:g} seconds, "
                             f"got {timeout_s}")


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


#: The largest --max-trace-mb taken (the output's gzipped size limit; a committed trace is 5 MB).
MAX_TRACE_MB = 4096.0


def trace_limit(max_trace_mb: float | None) -> dict[str, int]:
    """``--max-trace-mb`` as the ``max_trace_bytes`` of a capture request (none given: the default)."""
    if max_trace_mb is not None and not 0 < max_trace_mb <= MAX_TRACE_MB:  # also NaN and inf
        raise PhaseprofError(f"--max-trace-mb must be more than 0 and at most {MAX_TRACE_MB:g}, got {max_trace_mb}")
    return {} if max_trace_mb is None else {"max_trace_bytes": int(max_trace_mb * 1024 * 1024)}


def capture_server(capture: CaptureOptions, *, server: str, trace_dir: Path | None, concurrency: int,
                   timeout_s: float, console: Console, argv: list[str], ray: str | None = None,
                   trace_wait_s: float = 120.0, max_trace_mb: float | None = None) -> None:
    """``phaseprof capture --server``: check, time, profile, collect, analyse, print. ``capture``: the same
    options an in-process capture takes (``CaptureOptions.of``); ``ray``: a Ray cluster's address, to collect
    from every node of it; ``max_trace_mb``: --max-trace-mb, the size limit of the trace.json.gz written (the
    server's trace itself is read only up to ``capture.MAX_SERVER_TRACE_BYTES`` decompressed)."""
    from phaseprof.capture.server.capture import ServerCapture, ServerTarget, capture_from_server  # noqa: PLC0415
    from phaseprof.capture.shared.result import print_headline  # noqa: PLC0415

    if trace_dir is None:
        raise PhaseprofError("--server needs --trace-dir (the server's torch_profiler_dir, as seen from here)")
    if capture.phase is Phase.DECODE and capture.output_tokens < 2:
        raise PhaseprofError("--phase decode needs --output-tokens of at least 2 (TPOT is the time per token after "
                             "the first)")
    if concurrency < 1:
        raise PhaseprofError(f"--concurrency must be at least 1, got {concurrency}")
    check_request_timeout(timeout_s)
    if not trace_wait_s > 0:  # also NaN
        raise PhaseprofError(f"--trace-wait must be more than 0 seconds, got {trace_wait_s}")
    limit = trace_limit(max_trace_mb)
    req = ServerCapture(capture=replace(capture, concurrency=concurrency), trace_dir=trace_dir, ray=ray,
                        server=ServerTarget(server, timeout_s=timeout_s), trace_wait_s=trace_wait_s, **limit)
    res = capture_from_server(req, console=console, argv=server_argv(argv, phase=capture.phase))
    print_headline(res, console)
    if res.breakdown_error or not res.breakdowns:  # the run directory keeps the traces; the capture failed
        raise PhaseprofError(f"no breakdown: {res.breakdown_error or 'no rank trace was analysed'} (the traces "
                             "and run.json are kept there)", path=res.run_dir)
    if len(res.breakdowns) == 1:
        from phaseprof.capture.shared.rundir import print_table  # noqa: PLC0415

        print_table(next(iter(res.breakdowns.values())), console)
    elif res.rank_summary is not None:
        from phaseprof.commands.scale import print_multirank  # noqa: PLC0415

        print_multirank(res.rank_summary, console)


def capture_disagg(capture: CaptureOptions, *, prefill: tuple[str, Path | None], decode: tuple[str, Path | None],
                   link: str, timeout_s: float, trace_wait_s: float, console: Console, argv: list[str],
                   max_trace_mb: float | None = None) -> None:
    """``phaseprof capture --server P --decode-server D``: time and profile requests through a disaggregated
    prefill/decode pair (``disagg/capture.py``), write the run directory, print the handoff table."""
    from phaseprof.capture.server.capture import ServerTarget  # noqa: PLC0415
    from phaseprof.disagg.capture import PdCapture, capture_pd  # noqa: PLC0415
    from phaseprof.disagg.render import print_handoff  # noqa: PLC0415
    from phaseprof.sol.links import link_by_name  # noqa: PLC0415

    (p_url, p_dir), (d_url, d_dir) = prefill, decode
    if p_dir is None or d_dir is None:
        raise PhaseprofError("--decode-server needs --trace-dir (the prefill server's torch_profiler_dir) and "
                             "--decode-trace-dir (the decode server's), as seen from here")
    if capture.output_tokens < 2:
        raise PhaseprofError("--decode-server needs --output-tokens of at least 2 (TPOT is the time per token "
                             "after the first)")
    check_request_timeout(timeout_s)
    if not trace_wait_s > 0:  # also NaN
        raise PhaseprofError(f"--trace-wait must be more than 0 seconds, got {trace_wait_s}")
    link_by_name(link)  # an unknown link fails before any request
    limit = trace_limit(max_trace_mb)
    req = PdCapture(capture=capture, prefill=ServerTarget(p_url, timeout_s=timeout_s),
                    decode=ServerTarget(d_url, timeout_s=timeout_s), prefill_trace_dir=p_dir,
                    decode_trace_dir=d_dir, trace_wait_s=trace_wait_s, link=link, **limit)
    res = capture_pd(req, console=console, argv=argv)
    print_handoff(res.report, console)
    console.print(f"run directory: {res.run_dir}")
    err = res.sides.prefill.breakdown_error or res.sides.decode.breakdown_error
    if err:
        raise PhaseprofError(f"no breakdown: {err} (the traces, handoff.json and run.json are kept there)",
                             path=res.run_dir)


#: the most of a server log ``--server-log`` reads: vLLM logs its start-up facts in the first few thousand lines
MAX_SERVER_LOG_BYTES = 64 << 20


def server_log_facts(path: Path) -> dict[str, Any]:
    """vLLM's start-up facts (KV cache size, maximum concurrency, ...) from a server's log file, as an
    in-process sweep records them; one PhaseprofError naming the file when it cannot be read or holds none."""
    from phaseprof.vllm_log import parse_facts  # noqa: PLC0415

    from phaseprof.io import read_regular  # noqa: PLC0415

    head = read_regular(path, what="the server log", max_bytes=MAX_SERVER_LOG_BYTES, head=True)
    facts = parse_facts(head.decode("utf-8", errors="replace").splitlines())
    if facts.kv_cache_gib is None and facts.max_concurrency is None:
        raise PhaseprofError("no vLLM start-up facts in this file (no 'GPU KV cache size' or 'Maximum "
                             "concurrency' line): is it the server's log?", path=path)
    return facts.to_dict()


def stated_gpu(name: str | None) -> str | None:
    """``--gpu`` as recorded: printable, one line, at most 80 characters; one line of error otherwise."""
    if name is None:
        return None
    if not name.strip() or len(name) > 80 or not name.isprintable():
        raise PhaseprofError(f"--gpu takes a GPU's name (e.g. 'NVIDIA H200'; printable, at most 80 characters), "
                             f"got {name[:40]!r}")
    return name.strip()


def sweep_server(spec: SweepSpec, *, server: str, timeout_s: float, console: Console, argv: list[str],
                 server_log: Path | None = None, gpu: str | None = None) -> None:
    """``phaseprof sweep --server``: TTFT per length or TPOT per concurrency against the live server;
    ``server_log``: the server's log, for the start-up facts an in-process sweep records (capacity wall);
    ``gpu``: the GPU behind the server as the user states it (recorded with its source: speed of light)."""
    from phaseprof.capture.server.capture import ServerTarget  # noqa: PLC0415
    from phaseprof.capture.server.sweep import ServerSweep, run_server_sweep  # noqa: PLC0415
    from phaseprof.capture.shared.sweep import print_sweep  # noqa: PLC0415

    check_request_timeout(timeout_s)
    facts = None if server_log is None else server_log_facts(server_log)
    req = ServerSweep(spec=spec, server=ServerTarget(server, timeout_s=timeout_s), startup_facts=facts,
                      gpu=stated_gpu(gpu))
    directory, doc = run_server_sweep(req, console=console, argv=argv)
    print_sweep(doc, console)
    if doc.get("slope_us_per_token") is not None:
        from phaseprof.render.slope import slope_text  # noqa: PLC0415

        console.print(f"slope: {slope_text(doc['slope_us_per_token'])}")
    console.print(f"sweep directory: {directory}")
