"""``phaseprof capture --server P --decode-server D``: a disaggregated (PD) capture of two running vLLM servers
joined by a KV connector (NixlConnector).

Order: both trace directories exist -> both servers are vLLM, serve the same model, have the profiling route ->
``warmup`` + ``reps`` requests one at a time through prefill then decode (``exchange.run_request``: the proxy's
clock and the decode server's NIXL counters), no profiler -> ``profiled`` requests with both servers' profilers
on -> each server's new trace -> the run directory, written atomically: ``prefill/`` and ``decode/`` (each
``trace.json.gz`` + ``breakdown.json``, as a one-rank server capture), ``handoff.json`` (``records.HandoffReport``:
every request's TTFT split and NIXL transfer next to the planner's model of it) and ``run.json`` (kind ``pd``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from phaseprof import __version__
from phaseprof.capture.server.capture import ServerTarget, connect, post_profile, write_rank_traces
from phaseprof.capture.server.probe import FALLBACK_VOCAB, ServerInfo, check_length, check_profiling
from phaseprof.capture.server.rounds import RequestPlan
from phaseprof.capture.server.traces import ProfileWindow, snapshot, trace_dir_or_error, wait_for_traces
from phaseprof.capture.shared.options import CaptureOptions, Phase
from phaseprof.capture.shared.request import CaptureRequest, PdServers
from phaseprof.capture.shared.record import capture_record
from phaseprof.capture.shared.rundir import make_readable, run_dir_name, run_directory, unique_run_dir, utc_stamp
from phaseprof.capture.shared.timing import PhaseTiming, summarize
from phaseprof.capture.shared.trace_file import DEFAULT_MAX_TRACE_BYTES
from phaseprof.disagg.exchange import PdPair, run_request
from phaseprof.disagg.records import HandoffReport, HandoffRequest, centre, checked
from phaseprof.errors import PhaseprofError
from phaseprof.io import atomic_write_bytes
from phaseprof.records import DeviceRecord, DisaggInfo, DisaggSide, ModelInfo, RunDir, ServerRecord

#: The proxy's clock: PhaseTiming.source of a disaggregated capture.
PROXY_CLOCK = "pd_proxy_client"
#: Requests one PD capture may send to each server in all.
MAX_PD_REQUESTS = 200


@dataclass(frozen=True)
class PdCapture:
    """One disaggregated capture: ``capture`` (prompt and output tokens, warm-up, reps, seed, --out) on the
    ``prefill`` and ``decode`` servers, whose profiler directories (as seen from here) are ``prefill_trace_dir``
    and ``decode_trace_dir``; ``profiled`` requests run with both profilers on. ``link``: the catalogue link
    (``phaseprof/gpus.toml`` ``[[link]]``) the handoff is modelled on."""

    capture: CaptureOptions
    prefill: ServerTarget
    decode: ServerTarget
    prefill_trace_dir: Path
    decode_trace_dir: Path
    profiled: int = 1
    trace_wait_s: float = 120.0
    link: str = "nvlink4"
    max_trace_bytes: int = DEFAULT_MAX_TRACE_BYTES  # --max-trace-mb: each side's trace.json.gz at most

    @classmethod
    def of(cls, request: CaptureRequest) -> PdCapture:
        """The capture ``request`` asks of its ``PdServers`` target (decode, one prompt length)."""
        t = request.target
        if not isinstance(t, PdServers):
            raise TypeError(f"a PD capture of a request {request.where}")
        return cls(capture=request.capture_options(Phase.DECODE, request.workload.tokens[0]),
                   prefill=ServerTarget(t.server, timeout_s=t.request_timeout),
                   decode=ServerTarget(t.decode_server, timeout_s=t.request_timeout), prefill_trace_dir=t.trace_dir,
                   decode_trace_dir=t.decode_trace_dir, trace_wait_s=t.trace_wait, link=t.link,
                   max_trace_bytes=request.max_trace_bytes)


@dataclass(frozen=True)
class PdResult:
    run_dir: Path
    report: HandoffReport
    sides: DisaggInfo


def _same_model(p: ServerInfo, d: ServerInfo) -> None:
    if p.model_id != d.model_id:
        raise PhaseprofError(f"the prefill server {p.url} serves {p.model_id!r} but the decode server {d.url} "
                             f"serves {d.model_id!r}: a handoff needs the same model on both")


def _modelled(info: ServerInfo, prompt_tokens: int, req: PdCapture) -> tuple[Any, int, str | None]:
    """(the planner's Handoff or None, tokens the prefill server computes, why no model)."""
    from phaseprof.pareto.build import engine_layout  # noqa: PLC0415
    from phaseprof.pareto.disagg import handoff  # noqa: PLC0415
    from phaseprof.sol.links import link_by_name  # noqa: PLC0415

    layout, why = engine_layout(info.hf_config, info.version, info.settings or {})
    if layout is None:
        return None, prompt_tokens, why
    # vLLM's NixlConnector (0.23): for a model with Mamba/GDN layers the prefill server drops the last prompt
    # token and the decode server recomputes it (nixl/scheduler.py _truncate_mamba_request_for_prefill)
    computed = prompt_tokens - 1 if layout.num_gdn_layers and prompt_tokens > 1 else prompt_tokens
    return handoff(layout, computed, link_by_name(req.link)), computed, None


def _collect(trace_dir: Path, before: dict, window: ProfileWindow, wait_s: float, what: str,
             on_wait: Any) -> list[tuple[int, Path]]:
    got = wait_for_traces(trace_dir, before, expected=1, timeout_s=wait_s, window=window, on_wait=on_wait)
    files = [(r, p) for r, p in zip(got.ranks, got.files, strict=True) if r is not None]
    if len(files) != 1:
        raise PhaseprofError(f"the {what} server's profile gave {len(files)} rank traces; a PD capture takes "
                             "one engine of one GPU per side", path=trace_dir)
    return files


def _side(tmp: Path, final: Path, name: str, files: list[tuple[int, Path]], info: ServerInfo, trace_dir: Path,
          meta: dict[str, Any], max_trace_bytes: int = DEFAULT_MAX_TRACE_BYTES) -> tuple[DisaggSide, Any]:
    (tmp / name).mkdir()
    ranks = write_rank_traces(tmp / name, final / name, files, world_size=1, trace_dir=trace_dir, metadata=meta,
                              model_config=info.hf_config, quant=info.quant, max_trace_bytes=max_trace_bytes)
    bd = next(iter(ranks.breakdowns.values()), None)
    steps = {ph.phase: ph.steps for ph in bd.phases} if bd is not None else {}
    return DisaggSide(url=info.url, trace=f"{name}/trace.json.gz",
                      breakdown=None if bd is None else f"{name}/breakdown.json", breakdown_error=ranks.error,
                      steps=steps), bd


def capture_pd(req: PdCapture, *, console: Console, argv: list[str] | None = None) -> PdResult:
    """Run the whole capture (see the module docstring) and return what was written."""
    c = req.capture
    p_dir, d_dir = trace_dir_or_error(req.prefill_trace_dir), trace_dir_or_error(req.decode_trace_dir)
    n = c.warmup + c.reps + req.profiled
    if n > MAX_PD_REQUESTS:
        raise PhaseprofError(f"warm-up + reps + profiled = {n} requests exceeds the limit of {MAX_PD_REQUESTS}")
    p_client, p_info = connect(req.prefill.url, timeout_s=req.prefill.timeout_s, max_requests=n)
    d_client, d_info = connect(req.decode.url, timeout_s=req.decode.timeout_s, max_requests=n)
    _same_model(p_info, d_info)
    for info in (p_info, d_info):
        check_profiling(info)
        check_length(info, prompt_tokens=c.prompt_tokens, output_tokens=c.output_tokens)
    pair = PdPair(p_client, d_client)
    plan = RequestPlan(model=p_info.model_id, prompt_tokens=c.prompt_tokens, max_tokens=c.output_tokens,
                       vocab_size=p_info.vocab_size or FALLBACK_VOCAB, seed=c.seed)
    rows: list[HandoffRequest] = []
    counter_notes: list[str] = []

    def send(count: int, *, profiled: bool, keep: bool) -> None:
        for _ in range(count):
            row = run_request(pair, plan.body(), index=len(rows), profiled=profiled, prompt_tokens=c.prompt_tokens,
                              notes=counter_notes if keep else None)
            if keep:
                rows.append(row)

    what = f"{c.prompt_tokens} prompt + {c.output_tokens} output tokens"
    with console.status(f"Timing {what} through {p_info.url} -> {d_info.url}: {c.warmup} warm-up + {c.reps} "
                        "requests, one at a time (no profiler)"):
        send(c.warmup, profiled=False, keep=False)
        send(c.reps, profiled=False, keep=True)
    timed = list(rows)
    p_before, d_before = snapshot(p_dir), snapshot(d_dir)
    with console.status("Profiling both servers") as status:
        post_profile(p_client, "/start_profile", p_info, req.prefill.timeout_s)
        try:
            post_profile(d_client, "/start_profile", d_info, req.decode.timeout_s)
            try:
                send(req.profiled, profiled=True, keep=True)
            finally:
                status.update("Stopping the profilers (the servers write their traces now)")
                d_sent = time.time_ns()
                post_profile(d_client, "/stop_profile", d_info, req.decode.timeout_s)
                d_window = ProfileWindow(d_sent, time.time_ns())
        finally:
            p_sent = time.time_ns()
            post_profile(p_client, "/stop_profile", p_info, req.prefill.timeout_s)
            p_window = ProfileWindow(p_sent, time.time_ns())
        p_files = _collect(p_dir, p_before, p_window, req.trace_wait_s, "prefill", status.update)
        d_files = _collect(d_dir, d_before, d_window, req.trace_wait_s, "decode", status.update)
    modelled, computed, why = _modelled(p_info, c.prompt_tokens, req)
    median = centre(timed)
    ratio = lambda a, b: None if a is None or not b else round(a / b, 4)  # noqa: E731
    report = HandoffReport(
        prefill_url=p_info.url, decode_url=d_info.url, connector=_connector(p_info), model=p_info.model_id,
        prompt_tokens=c.prompt_tokens, prefill_computed_tokens=computed, output_tokens=c.output_tokens,
        requests=rows, median=median, modelled=modelled, model_note=why,
        bytes_ratio=ratio(median.bytes, modelled.bytes if modelled else None),
        time_ratio=ratio(median.xfer_ms, modelled.transfer_ms if modelled else None),
        notes=counter_notes + ([] if any(r.nixl for r in rows) or counter_notes else [
            "the decode server exported no vllm:nixl_* metrics (/metrics off, or no NixlConnector): no transfer "
            "measured"]))
    report = checked(report)  # the servers' numbers as facts or notes, before anything is written
    timing = PhaseTiming(phase=c.phase, prompt_tokens=c.prompt_tokens, output_tokens=c.output_tokens,
                         reps=len(timed), warmup=c.warmup, source=PROXY_CLOCK,
                         ttft=summarize([r.ttft_ms / 1e3 for r in timed]),
                         ttft_host=summarize([r.ttft_ms / 1e3 for r in timed]),
                         tpot=_tpot(timed), tpot_host=_tpot(timed), step_host_ms=())
    final = unique_run_dir(c.out, run_dir_name(device_slug="pd", model_slug=p_info.model_slug, phase="decode",
                                               tokens=c.label, stamp=utc_stamp()))
    meta = capture_record(c, timing, argv=argv, clock=PROXY_CLOCK, source="server",
                          server=ServerRecord(url=p_info.url), model=ModelInfo(name=p_info.model_id),
                          versions={"vllm": p_info.version}).embedded()
    with run_directory(final) as tmp:
        with console.status("Analyzing both traces"):
            p_side, p_bd = _side(tmp, final, "prefill", p_files, p_info, p_dir, meta, req.max_trace_bytes)
            d_side, d_bd = _side(tmp, final, "decode", d_files, d_info, d_dir, meta, req.max_trace_bytes)
        atomic_write_bytes(tmp / "handoff.json", _json(report.to_dict()))
        sides = DisaggInfo(prefill=p_side, decode=d_side, connector=report.connector, handoff="handoff.json")
        rec = capture_record(
            c, timing, argv=argv, clock=PROXY_CLOCK,
            prompt="random token ids, one seeded prompt per request (seed + request index)",
            kind="pd", source="server", versions={"vllm": p_info.version, "phaseprof": __version__},
            server=ServerRecord(**{k: v for k, v in p_info.to_dict().items() if k in _SERVER_KEYS},
                                trace_dir=str(p_dir)),
            mode=p_info.mode, quant=p_info.quant, model_config=p_info.hf_config,
            model=ModelInfo(name=p_info.model_id, kind="server", path=p_info.root, architecture=p_info.architecture),
            requests_sent=2 * n, vocab_size=p_info.vocab_size or FALLBACK_VOCAB, disagg=sides,
            breakdown_error=p_side.breakdown_error or d_side.breakdown_error, device=pd_device(p_bd, d_bd))
        RunDir(tmp).write(rec)
        make_readable(tmp)
    return PdResult(run_dir=final, report=report, sides=sides)


def pd_device(prefill: Any, decode: Any) -> DeviceRecord:
    """The GPU of a PD run, as its traces name it (the prefill side's, else the decode side's): the servers answer
    with a URL, their traces with the device (else the Runs page shows an empty GPU cell)."""
    name = next((bd.trace.gpu_name for bd in (prefill, decode) if bd is not None and bd.trace.gpu_name), None)
    return DeviceRecord(kind="cuda", name=name) if name else DeviceRecord()


_SERVER_KEYS = {"url", "model", "version", "root", "max_model_len", "world_size", "mode", "quant", "async_scheduling",
                "profiling_route"}


def _connector(info: ServerInfo) -> str | None:
    kv = (info.settings or {}).get("kv_connector")
    return str(kv) if kv else None


def _tpot(rows: list[HandoffRequest]) -> Any:
    vals = [r.tpot_ms / 1e3 for r in rows if r.tpot_ms is not None]
    return summarize(vals) if vals else None


def _json(doc: Any) -> bytes:
    import orjson  # noqa: PLC0415

    return orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n"
