"""The ``--server`` branches of ``phaseprof capture`` and ``phaseprof sweep`` (kept out of cli.py)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from phaseprof.capture.shared.request import CaptureRequest, check_request_timeout
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


def capture_server(request: CaptureRequest, *, console: Console) -> None:
    """``phaseprof capture --server``: check, time, profile, collect, analyse, print (``request``'s target is a
    ``Server``; the server's own trace is read only up to ``capture.MAX_SERVER_TRACE_BYTES`` decompressed)."""
    from phaseprof.capture.server.capture import ServerCapture, capture_from_server  # noqa: PLC0415
    from phaseprof.capture.shared.result import print_headline  # noqa: PLC0415

    res = capture_from_server(ServerCapture.of(request), console=console, argv=request.command())
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


def capture_disagg(request: CaptureRequest, *, console: Console) -> None:
    """``phaseprof capture --server P --decode-server D``: time and profile requests through a disaggregated
    prefill/decode pair (``disagg/capture.py``; ``request``'s target is a ``PdServers``), write the run directory,
    print the handoff table."""
    from phaseprof.disagg.capture import PdCapture, capture_pd  # noqa: PLC0415
    from phaseprof.disagg.render import print_handoff  # noqa: PLC0415

    res = capture_pd(PdCapture.of(request), console=console, argv=request.command())
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
