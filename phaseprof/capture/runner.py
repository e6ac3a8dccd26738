"""One capture on a started engine: clean timing, then the profiled request, then the run directory.

``capture_phase`` is what the CLI, the sweep's ``--profile-at`` and the GPU session script all call.
"""

from __future__ import annotations

import datetime as dt
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import msgspec
from rich.console import Console

from phaseprof.capture.device import detect_device
from phaseprof.capture.engine import EngineSession, require_vllm, start_engine
from phaseprof.capture.models import check_device, check_tokens, default_model_name, resolve_model
from phaseprof.capture.options import CaptureOptions, EngineOptions, Hierarchy, Phase
from phaseprof.capture.profile import DEFAULT_MAX_TRACE_BYTES, ProfiledRun, TraceFile, finalize_trace, profile_request
from phaseprof.capture.routing_hook import METHOD
from phaseprof.capture.rundir import (
    analyze_into,
    command_line,
    make_readable,
    run_dir_name,
    tokens_label,
    run_directory,
    unique_run_dir,
    utc_stamp,
)
from phaseprof.capture.progress import Stages, quiet_stages
from phaseprof.capture.quiet import LOG_NAME, VllmOutput
from phaseprof.capture.start_notice import start_notice
from phaseprof.capture.timing import PhaseTiming, time_phase
from phaseprof.records import (DeviceRecord, EngineInfo, Headline, ModelInfo, ProfileInfo, RequestInfo, RunRecord,
                               TraceFileInfo)
from phaseprof.routing import RoutingRecord, write_routing


@dataclass(frozen=True)
class CaptureResult:
    """A finished capture.

    ``overhead_ratio`` = profiled / unprofiled host-clock time of the same quantity (TTFT for prefill, per-token
    decode step time for decode); 1.25 means the profiler made the phase 25% slower.
    """

    run_dir: Path
    timing: PhaseTiming
    profiled: ProfiledRun
    trace: TraceFile
    overhead_ratio: float | None
    breakdown: Any | None
    breakdown_error: str | None
    run: dict[str, Any]


def open_session(opts: EngineOptions, *, console: Console, stages: Stages | None = None,
                 output_redirected: bool = False) -> EngineSession:
    """Resolve the model, check device and request size (cheap checks first), then start the engine
    (``stages`` and ``output_redirected``: see ``start_engine``)."""
    if opts.model is not None:
        resolve_model(opts.model)  # an unknown preset fails here, before vLLM's slow import
    require_vllm()
    device = detect_device()
    name = opts.model
    if name is None:
        name = default_model_name(device.kind == "cuda")
        why = "CUDA is available" if device.kind == "cuda" else "no CUDA GPU: using the CPU-sized hybrid preset"
        console.print(f"model: preset [bold]{name}[/] (default; {why})")
    source = resolve_model(name)
    check_device(source, cuda_available=device.kind == "cuda")
    check_tokens(source, prompt_tokens=opts.max_prompt_tokens, output_tokens=opts.max_output_tokens,
                 engine_args=opts.engine_args)
    console.print(start_notice(device_kind=device.kind, device_name=device.name, mode=str(opts.mode), model=name),
                  highlight=False, markup=False)
    return start_engine(source, replace(opts, model=name), device=device, console=console, stages=stages,
                        output_redirected=output_redirected)


def overhead_ratio(timing: PhaseTiming, profiled: ProfiledRun) -> float | None:
    """Profiled host time over the clean host-clock median of the same quantity."""
    clean = timing.headline_host.median_ms / 1e3
    if profiled.host_s is None or clean <= 0:
        return None
    return profiled.host_s / clean


def _steps_json(profiled: ProfiledRun) -> list[dict[str, Any]]:
    out = []
    for s in profiled.drive.steps:
        c = s.counts
        out.append({
            "index": s.index, "profiled": s.index < profiled.profiled_steps,
            "marker": c.marker(s.index) if s.index < profiled.profiled_steps else None,
            "host_ms": round(s.host_s * 1e3, 4), "context_requests": c.context_requests,
            "context_tokens": c.context_tokens, "generation_requests": c.generation_requests,
            "generation_tokens": c.generation_tokens,
            "verified_by_scheduler": s.actual is not None, "prediction_matched": s.actual in (None, s.predicted),
        })
    return out


def _headline(opts: CaptureOptions, timing: PhaseTiming) -> Headline:
    head = timing.headline
    return Headline(metric="tpot" if opts.phase is Phase.DECODE else "ttft", median_ms=head.median_ms,
                    p10_ms=head.p10_ms, p90_ms=head.p90_ms, source=timing.source)


def run_record(session: EngineSession, opts: CaptureOptions, timing: PhaseTiming, profiled: ProfiledRun,
               trace: TraceFile, ratio: float | None, argv: list[str] | None) -> RunRecord:
    """Everything needed to reproduce and interpret the capture (see docs/capture.md for each field); the
    breakdown fields are set once the analysis ran."""
    src = session.source
    return RunRecord(
        created_utc=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        command=command_line(argv),
        mode=str(session.options.mode), quant=str(session.options.quant),
        # Clean (profiler-off) medians as plain top-level numbers, the names `phaseprof diff` and the dashboard read.
        ttft_ms=timing.ttft.median_ms, tpot_ms=timing.tpot.median_ms if timing.tpot else None,
        versions=session.versions, device=DeviceRecord(**session.device.to_dict()),
        model=ModelInfo.of_source(src), model_config=src.hf_config,
        engine=EngineInfo(kwargs=session.plan.kwargs, env=session.plan.env, notes=list(session.plan.notes),
                          startup_s=round(session.startup_s, 3)),
        vllm_startup_facts=session.facts.to_dict(),
        request=RequestInfo(phase=str(opts.phase), prompt_tokens=opts.tokens, max_tokens=opts.max_tokens,
                            concurrency=1, seed=opts.seed),
        headline=_headline(opts, timing),
        timing=timing.to_dict(),
        profile=ProfileInfo(
            profiled_steps=profiled.profiled_steps,
            host_ms=None if profiled.host_s is None else round(profiled.host_s * 1e3, 4),
            overhead_ratio=None if ratio is None else round(ratio, 4),
            overhead_definition="profiled / unprofiled host-clock time: TTFT (prefill) or mean decode-step "
                                "time vs host TPOT median (decode)",
            activities=["cpu", "cuda"] if session.device.kind == "cuda" else ["cpu"],
            profile_memory=True, record_shapes=False,
            hierarchy=str(profiled.hierarchy), with_stack=profiled.hierarchy is Hierarchy.STACK,
            module_calls=profiled.module_calls,
            steps=_steps_json(profiled),
        ),
        trace=TraceFileInfo(**trace.to_dict()),
    )


def trace_metadata(session: EngineSession, opts: CaptureOptions, timing: PhaseTiming,
                   ratio: float | None) -> dict[str, Any]:
    """What the trace itself says about its capture (top-level ``phaseprof`` key of trace.json.gz):
    ``RunRecord.embedded``."""
    rec = RunRecord(
        mode=str(session.options.mode), quant=str(session.options.quant), versions=session.versions,
        device=DeviceRecord(**session.device.to_dict()), model=ModelInfo(name=session.source.name),
        request=RequestInfo(phase=str(opts.phase), prompt_tokens=opts.tokens, max_tokens=opts.max_tokens),
        headline=_headline(opts, timing),
        ttft_ms=timing.ttft.median_ms, tpot_ms=timing.tpot.median_ms if timing.tpot else None,
        profile=ProfileInfo(hierarchy=str(opts.hierarchy)))
    return rec.embedded(ratio)


def write_routing_of(profiled: ProfiledRun, run_dir: Path) -> dict[str, Any] | None:
    """Write the profiled steps' MoE routing (``routing.npz``) into ``run_dir``; run.json's ``routing`` value
    (a ``RoutingRecord``, or one saying why no step was recorded), None for models without MoE routers."""
    rec = profiled.routing
    if rec is None:
        return None
    per_step = rec.steps()
    base = RoutingRecord(method=METHOD, num_experts=rec.num_experts, top_k=rec.top_k, moe_layers=rec.layers,
                         steps=sorted(per_step), tokens=[int(per_step[s].shape[1]) for s in sorted(per_step)])
    if not per_step:
        return msgspec.structs.replace(base, file=None, why_not=(
            "no profiled step called the routers from Python (CUDA-graph replays do not): capture with "
            "--mode eager to record routing")).to_dict()
    return write_routing(run_dir, base, [per_step[s] for s in sorted(per_step)]).to_dict()


def capture_phase(session: EngineSession, opts: CaptureOptions, *, console: Console,
                  argv: list[str] | None = None, max_trace_bytes: int = DEFAULT_MAX_TRACE_BYTES,
                  run_dir: Path | None = None, stages: Stages | None = None,
                  vllm_log: VllmOutput | None = None) -> CaptureResult:
    """Time ``opts.phase`` cleanly, profile it once, write the run directory atomically, and return it.

    ``stages``: progress display (none by default); ``vllm_log``: vLLM's log so far is copied into the run
    directory as ``vllm.log``.
    """
    stages = stages or quiet_stages()
    stages.prefix = f"{opts.phase} {tokens_label(str(opts.phase), opts.tokens, opts.output_tokens)}: "
    timing = time_phase(session, phase=opts.phase, prompt_tokens=opts.tokens, output_tokens=opts.output_tokens,
                        reps=opts.reps, warmup=opts.warmup, seed=opts.seed, stages=stages)
    final = run_dir or unique_run_dir(opts.out, run_dir_name(
        device_slug=session.device.slug, model_slug=session.source.slug, phase=str(opts.phase),
        tokens=tokens_label(str(opts.phase), opts.tokens, opts.output_tokens), stamp=utc_stamp()))
    with tempfile.TemporaryDirectory(prefix="phaseprof-raw-") as work, run_directory(final) as tmp:
        with stages.stage("profiled request (torch.profiler, one marker per engine step)"):
            profiled = profile_request(session, phase=opts.phase, prompt_tokens=opts.tokens,
                                       output_tokens=opts.output_tokens, seed=opts.seed,
                                       profile_decode_steps=opts.profile_decode_steps, workdir=Path(work),
                                       hierarchy=opts.hierarchy)
            ratio = overhead_ratio(timing, profiled)
        with stages.stage("trace export (trim, gzip)"):
            trace = finalize_trace(profiled.raw_trace, tmp / "trace.json.gz",
                                   corrections=profiled.drive.corrections(),
                                   metadata=trace_metadata(session, opts, timing, ratio), max_bytes=max_trace_bytes)
        routing = write_routing_of(profiled, tmp)
        with stages.stage("analysis"):
            bd, err = analyze_into(tmp / "trace.json.gz", tmp, final_trace=final / "trace.json.gz",
                                   model_config=session.source.hf_config, routing=routing)
        rec = run_record(session, opts, timing, profiled, trace, ratio, argv)
        rec = replace(rec, breakdown=None if err else "breakdown.json", breakdown_error=err)
        if routing is not None:
            rec = replace(rec, extra={**rec.extra, "routing": routing})
        if vllm_log is not None:
            vllm_log.copy_into(tmp)
            rec = replace(rec, extra={**rec.extra, "vllm_log": LOG_NAME})
        rec.write(tmp / "run.json")
        run = rec.to_dict()
        make_readable(tmp)
    stages.prefix = ""
    return CaptureResult(run_dir=final, timing=timing, profiled=profiled,
                         trace=replace(trace, path=final / trace.path.name),
                         overhead_ratio=ratio, breakdown=bd, breakdown_error=err, run=run)


def print_headline(result: CaptureResult, console: Console) -> None:
    """The clean number, its spread and source, and the profiler overhead."""
    t = result.timing
    h = t.headline
    metric = "TPOT" if t.phase is Phase.DECODE else "TTFT"
    src = "vLLM request metrics" if t.source == "vllm_request_metrics" else "host clock"
    console.print(
        f"[bold]{metric} {h.median_ms:.2f} ms[/] (p10 {h.p10_ms:.2f}, p90 {h.p90_ms:.2f}; {t.reps} reps, {src})"
        + (f"  ·  TTFT {t.ttft.median_ms:.2f} ms" if t.phase is Phase.DECODE else "")
    )
    if result.overhead_ratio is not None:
        console.print(f"profiler overhead ×{result.overhead_ratio:.2f} (profiled / unprofiled host time); "
                      f"{result.profiled.profiled_steps} profiled steps, trace {result.trace.gz_bytes / 1e6:.2f} MB")
    if result.breakdown_error:
        console.print(f"[yellow]no breakdown:[/] {result.breakdown_error}")
    console.print(f"run directory: {result.run_dir}")
