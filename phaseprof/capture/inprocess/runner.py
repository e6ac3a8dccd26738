"""One capture on a started engine: clean timing, then the profiled request, then the run directory.

``capture_phase`` is what the CLI, the sweep's ``--profile-at`` and the GPU session script all call.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import msgspec
from rich.console import Console

from phaseprof.capture.inprocess.device import detect_device
from phaseprof.capture.inprocess.engine import EngineSession, require_vllm, start_engine
from phaseprof.capture.inprocess.models import check_device, check_tokens, default_model_name, resolve_model
from phaseprof.capture.inprocess.profile import ProfiledRun, profile_request
from phaseprof.capture.inprocess.progress import Stages, quiet_stages
from phaseprof.capture.inprocess.quiet import LOG_NAME, VllmOutput
from phaseprof.capture.inprocess.routing_hook import METHOD
from phaseprof.capture.inprocess.start_notice import start_notice
from phaseprof.capture.inprocess.timing import time_phase
from phaseprof.capture.shared.options import CaptureOptions, EngineOptions, Hierarchy
from phaseprof.capture.shared.rundir import (
    analyze_into,
    make_readable,
    run_dir_name,
    run_directory,
    unique_run_dir,
    utc_stamp,
)
from phaseprof.capture.shared.record import capture_record
from phaseprof.capture.shared.result import CaptureResult
from phaseprof.capture.shared.timing import PhaseTiming
from phaseprof.capture.shared.trace_file import DEFAULT_MAX_TRACE_BYTES, TraceFile, finalize_trace
from phaseprof.pareto.records import AsyncScheduling, to_builtins
from phaseprof.records import DeviceRecord, EngineInfo, ModelInfo, ProfileInfo, RunRecord, TraceFileInfo
from phaseprof.routing import RoutingRecord, write_routing


@dataclass(frozen=True)
class ServingTiming:
    """A point's clean timing on the serving-default engine (vLLM's own ``async_scheduling``), when that is
    another engine than the marker-friendly one the profiled steps run on."""

    timing: PhaseTiming
    async_scheduling: bool | None


def async_record(session: EngineSession, marker: PhaseTiming, serving: ServingTiming | None) -> AsyncScheduling:
    """What the timed and the profiled engine ran with; both headline medians and their ratio when the point
    was timed on both."""
    metric = marker.phase.metric
    if serving is None:
        value = session.async_scheduling
        return AsyncScheduling(timed=value, profiled=value, timed_source=f"one engine timed and profiled "
                               f"(async_scheduling={value})", refused=session.async_refusal(), metric=metric,
                               serving_timing_ms=marker.headline.median_ms)
    s_ms, m_ms = serving.timing.headline.median_ms, marker.headline.median_ms
    return AsyncScheduling(timed=serving.async_scheduling, profiled=session.async_scheduling,
                           timed_source="vLLM's default (serving engine); profiled on a second engine with "
                                        "async_scheduling=False", metric=metric, serving_timing_ms=s_ms,
                           marker_timing_ms=m_ms, ratio=round(m_ms / s_ms, 4) if s_ms > 0 else None)


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


def marker_session(session: EngineSession, *, console: Console, stages: Stages | None = None,
                   output_redirected: bool = False) -> EngineSession:
    """The engine profiled steps run on: ``session`` itself when its async scheduling is off (the serving
    default on this platform, or asked for), else a second engine with ``async_scheduling=False``, started
    after ``session`` was closed (one engine's memory at a time)."""
    if not session.async_scheduling:
        return session
    opts = replace(session.options, async_scheduling=False)
    session.close()
    return open_session(opts, console=console, stages=stages, output_redirected=output_redirected)


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
            "index": s.index, "profiled": profiled.was_profiled(s.index),
            "marker": c.marker(s.index) if profiled.was_profiled(s.index) else None,
            "host_ms": round(s.host_s * 1e3, 4), "context_requests": c.context_requests,
            "context_tokens": c.context_tokens, "generation_requests": c.generation_requests,
            "generation_tokens": c.generation_tokens,
            "verified_by_scheduler": s.actual is not None, "prediction_matched": s.actual in (None, s.predicted),
        })
    return out


def run_record(session: EngineSession, opts: CaptureOptions, timing: PhaseTiming, profiled: ProfiledRun,
               trace: TraceFile, ratio: float | None, argv: list[str] | None,
               serving: ServingTiming | None = None) -> RunRecord:
    """Everything needed to reproduce and interpret the capture (see docs/capture.md for each field); the
    breakdown fields are set once the analysis ran. ``timing``: the profiled engine's clean timing;
    ``serving``: the same point on the serving-default engine, which then is the headline."""
    src = session.source
    shown = serving.timing if serving is not None else timing
    timing_doc = shown.to_dict()
    if serving is not None:
        timing_doc["profiled_engine"] = timing.to_dict()
    return capture_record(
        opts, shown, argv=argv, timing=timing_doc,
        mode=str(session.options.mode), quant=str(session.options.quant),
        versions=session.versions, device=DeviceRecord(**session.device.to_dict()),
        model=ModelInfo.of_source(src), model_config=src.hf_config,
        engine=EngineInfo(kwargs=session.plan.kwargs, env=session.plan.env, notes=list(session.plan.notes),
                          startup_s=round(session.startup_s, 3),
                          async_scheduling=to_builtins(async_record(session, timing, serving))),
        vllm_startup_facts=session.facts.to_dict(),
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
    ``RunRecord.embedded``. ``timing``: the headline timing (the serving engine's when there is one)."""
    rec = capture_record(opts, timing, argv=None, mode=str(session.options.mode),
                         quant=str(session.options.quant), versions=session.versions,
                         device=DeviceRecord(**session.device.to_dict()), model=ModelInfo(name=session.source.name),
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
                  vllm_log: VllmOutput | None = None, serving: ServingTiming | None = None,
                  decode_only: bool = False) -> CaptureResult:
    """Time ``opts.phase`` cleanly, profile it once, write the run directory atomically, and return it.

    ``stages``: progress display (none by default); ``vllm_log``: vLLM's log so far is copied into the run
    directory as ``vllm.log``; ``serving``: the same point's timing on the serving-default engine (then the
    headline; this engine's timing is kept beside it, with the ratio); ``decode_only``: see ``profile_request``.
    """
    stages = stages or quiet_stages()
    stages.prefix = f"{opts.phase} {opts.label}: "
    timing = time_phase(session, opts, stages=stages)
    final = run_dir or unique_run_dir(opts.out, run_dir_name(
        device_slug=session.device.slug, model_slug=session.source.slug, phase=str(opts.phase),
        tokens=opts.label, stamp=utc_stamp()))
    with tempfile.TemporaryDirectory(prefix="phaseprof-raw-") as work, run_directory(final) as tmp:
        with stages.stage("profiled request (torch.profiler, one marker per engine step)"):
            profiled = profile_request(session, opts, workdir=Path(work), decode_only=decode_only)
            ratio = overhead_ratio(timing, profiled)
        with stages.stage("trace export (trim, gzip)"):
            trace = finalize_trace(profiled.raw_trace, tmp / "trace.json.gz",
                                   corrections=profiled.drive.corrections(),
                                   metadata=trace_metadata(session, opts, serving.timing if serving else timing,
                                                           ratio), max_bytes=max_trace_bytes)
        routing = write_routing_of(profiled, tmp)
        with stages.stage("analysis"):
            bd, err = analyze_into(tmp / "trace.json.gz", tmp, final_trace=final / "trace.json.gz",
                                   model_config=session.source.hf_config, routing=routing)
        rec = run_record(session, opts, timing, profiled, trace, ratio, argv, serving)
        rec = replace(rec, breakdown=None if err else "breakdown.json", breakdown_error=err)
        if routing is not None:
            rec = replace(rec, routing=routing)
        if vllm_log is not None:
            vllm_log.copy_into(tmp)
            rec = replace(rec, vllm_log=LOG_NAME)
        rec.write(tmp / "run.json")
        make_readable(tmp)
    stages.prefix = ""
    return CaptureResult(run_dir=final, record=rec, timing=serving.timing if serving else timing,
                         overhead_ratio=ratio, breakdowns={} if bd is None else {0: bd}, breakdown_error=err,
                         run=rec.to_dict())
