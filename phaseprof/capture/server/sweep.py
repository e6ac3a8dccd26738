"""``phaseprof sweep --server URL``: TTFT vs prompt length, or TPOT and throughput vs concurrency, on a live
server (no profiler). Same ``sweep.json`` + plot as the in-process sweep (``sweep_dir.py``); numbers are on the
client clock (see rounds.py)."""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from phaseprof.capture.server.capture import ServerTarget, connect
from phaseprof.capture.server.client import StreamedRequest
from phaseprof.capture.server.probe import FALLBACK_VOCAB, check_length
from phaseprof.capture.server.rounds import CLIENT_CLOCK, RequestPlan, round_throughput, run_rounds
from phaseprof.capture.shared.options import Phase
from phaseprof.capture.shared.rundir import (
    command_line,
    make_readable,
    run_dir_name,
    run_directory,
    unique_run_dir,
    utc_stamp,
)
from phaseprof.capture.shared.serving import RequestTimes, gaps, serving_metrics
from phaseprof.capture.shared.sweep import (
    DecodePoint,
    PrefillPoint,
    SweepSpec,
    decode_plot_spec,
    prefill_plot_spec,
    slope_us_per_token,
    spread,
    write_plot,
)
from phaseprof.capture.shared.timing import summarize
from phaseprof.errors import PhaseprofError
from phaseprof.pareto.gpu import STATED
from phaseprof.pareto.records import AsyncScheduling, to_builtins
from phaseprof.records import RUN_SCHEMA_VERSION, SweepRecord

MAX_SWEEP_REQUESTS = 5000


@dataclass(frozen=True)
class ServerSweep:
    """A sweep (``spec``, as in-process) on ``server``. ``budget_s``: points not started within it are skipped
    (and recorded as skipped)."""

    spec: SweepSpec
    server: ServerTarget
    budget_s: float | None = None
    startup_facts: dict[str, Any] | None = None  # --server-log: vLLM's start-up facts (vllm_log.StartupFacts)
    gpu: str | None = None  # the GPU behind the server, as the user stated it (recorded in device.gpu)


def stream_times(r: StreamedRequest, prompt_tokens: int) -> RequestTimes:
    """One streamed request on the client clock (ITL: gaps between token-carrying chunks)."""
    return RequestTimes(t_send_s=r.t_send_s, t_done_s=r.t_done_s, ttft_s=r.ttft_s, tpot_s=r.tpot_s,
                        itl_s=gaps(r.chunk_t_s), prompt_tokens=prompt_tokens, output_tokens=r.output_tokens)


def run_server_sweep(req: ServerSweep, *, console: Console, argv: list[str] | None = None
                     ) -> tuple[Path, dict[str, Any]]:
    """Run the sweep against the server and write ``sweep.json`` + plot atomically."""
    sp = req.spec
    n = sp.request_count()
    if n > MAX_SWEEP_REQUESTS:
        raise PhaseprofError(f"this sweep would send {n} requests, more than the limit of {MAX_SWEEP_REQUESTS}; "
                             "use fewer points or --reps")
    client, info = connect(req.server.url, timeout_s=req.server.timeout_s, max_requests=n)
    longest = max(sp.lengths) if sp.phase is Phase.PREFILL else sp.prompt_tokens
    check_length(info, prompt_tokens=longest, output_tokens=sp.phase.max_tokens(sp.output_tokens))
    vocab = info.vocab_size or FALLBACK_VOCAB
    deadline = None if req.budget_s is None else time.monotonic() + req.budget_s
    doc: dict[str, Any] = {
        "schema_version": RUN_SCHEMA_VERSION, "kind": "sweep", "source": "server", "phase": str(sp.phase),
        "created_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": command_line(argv), "server": info.to_dict(), "versions": {"vllm": info.version},
        "device": {"kind": "server", "name": info.url,
                   **({"gpu": req.gpu, "gpu_source": STATED} if req.gpu else {})},
        "model": {"name": info.model_id, "kind": "server", "path": info.root},
        "model_config": info.hf_config,
        "engine": {"mode": info.mode or "?", "quant": info.quant, "kwargs": info.settings or None,
                   "world_size": info.world_size or 1,
                   "world_size_source": "server /server_info" if info.world_size else "assumed 1 (the server "
                   "does not report its parallel config without VLLM_SERVER_DEV_MODE=1)",
                   "async_scheduling": to_builtins(AsyncScheduling(
                       timed=info.async_scheduling, profiled=None,
                       timed_source="the server's own setting (/server_info)" if info.async_scheduling is not None
                       else "the server's own setting (not reported without VLLM_SERVER_DEV_MODE=1)"))},
        "reps": sp.reps, "warmup": sp.warmup, "seed": sp.seed,
        "timing_source": CLIENT_CLOCK,
        "vllm_startup_facts": req.startup_facts,
    }
    final = unique_run_dir(sp.out, run_dir_name(device_slug="server", model_slug=info.model_slug,
                                                phase=f"sweep-{sp.phase}", tokens=sp.label, stamp=utc_stamp()))
    t0 = time.perf_counter()
    skipped: list[int] = []
    with run_directory(final) as tmp, console.status(f"{sp.phase} sweep on {info.url}") as st:
        title = f"{info.model_id} at {info.url}"
        if sp.phase is Phase.PREFILL:
            points: list[PrefillPoint] = []
            for length in sp.lengths:
                if deadline is not None and time.monotonic() > deadline:
                    skipped.append(length)
                    continue
                plan = RequestPlan(info.model_id, length, 1, vocab, seed=sp.seed)
                run_rounds(client, plan, rounds=sp.warmup, concurrency=1)
                rounds = run_rounds(client, plan, rounds=sp.reps, concurrency=1)
                ttft = summarize([r.ttft_s for rnd in rounds for r in rnd if r.ttft_s is not None])
                points.append(PrefillPoint(prompt_tokens=length, ttft=ttft, ttft_host=ttft, source=CLIENT_CLOCK))
                st.update(f"prefill sweep: {length} tokens TTFT {ttft.median_ms:.2f} ms")
            doc["points"] = [p.to_dict() for p in points]
            doc["skipped"] = skipped
            doc["slope_us_per_token"] = slope_us_per_token(points)
            spec = prefill_plot_spec(points, title=f"TTFT vs prompt length — {title}")
        else:
            dpoints: list[DecodePoint] = []
            for c in sp.concurrency:
                if deadline is not None and time.monotonic() > deadline:
                    skipped.append(c)
                    continue
                plan = RequestPlan(info.model_id, sp.prompt_tokens, sp.output_tokens, vocab, seed=sp.seed)
                run_rounds(client, plan, rounds=sp.warmup, concurrency=c)
                rounds = run_rounds(client, plan, rounds=sp.reps, concurrency=c)
                tpot = summarize([r.tpot_s for rnd in rounds for r in rnd if r.tpot_s is not None])
                rates = [v for rnd in rounds if (v := round_throughput(rnd)) is not None]
                serving = serving_metrics([[stream_times(r, sp.prompt_tokens) for r in rnd] for rnd in rounds],
                                          concurrency=c, prompt_tokens=sp.prompt_tokens,
                                          output_tokens=sp.output_tokens, world_size=info.world_size or 1,
                                          latency_source=CLIENT_CLOCK)
                dpoints.append(DecodePoint(concurrency=c, prompt_tokens=sp.prompt_tokens,
                                           output_tokens=sp.output_tokens, tpot=tpot,
                                           output_tok_per_s=spread(rates),
                                           decode_tok_per_s=c / (tpot.median_ms / 1e3), source=CLIENT_CLOCK,
                                           serving=serving))
                st.update(f"decode sweep: c={c} TPOT {tpot.median_ms:.2f} ms")
            doc["points"] = [p.to_dict() for p in dpoints]
            doc["skipped"] = skipped
            spec = decode_plot_spec(dpoints, title=f"Decode TPOT and throughput — {title}")
        doc["plot_files"] = write_plot(spec, tmp)
        doc["requests_sent"] = client.sent
        doc["elapsed_s"] = round(time.perf_counter() - t0, 3)
        rec = SweepRecord.from_dict(doc, source="sweep.json")  # the one writer and reader of sweep.json
        rec.write(tmp / "sweep.json")
        make_readable(tmp)
    return final, rec.to_dict()
