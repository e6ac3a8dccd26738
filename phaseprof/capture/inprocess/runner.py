"""One capture on a started engine: clean timing, then the profiled request, then the run directory.

``capture_phase`` is what the CLI, the sweep's ``--profile-at`` and the GPU session script all call.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import msgspec
from rich.console import Console

from phaseprof.capture.inprocess.device import DeviceInfo, detect_device
from phaseprof.capture.inprocess.engine import GPU_MEMORY_UTILIZATION, EngineSession, require_vllm, start_engine
from phaseprof.capture.inprocess.gpu_memory import MemoryProbe, cuda_mem_info, wait_until_free
from phaseprof.capture.inprocess.models import (
    ModelSource,
    check_device,
    check_tokens,
    default_model_name,
    resolve_model,
)
from phaseprof.capture.inprocess.profile import ProfiledRun, profile_request
from phaseprof.capture.inprocess.progress import Stages, quiet_stages
from phaseprof.capture.inprocess.quiet import LOG_NAME, VllmOutput
from phaseprof.capture.inprocess.routing_hook import METHOD
from phaseprof.capture.inprocess.start_notice import start_notice
from phaseprof.capture.inprocess.serving_process import ServingResult, time_in_own_process
from phaseprof.capture.inprocess.timing import time_phase
from phaseprof.capture.shared.options import CaptureOptions, EngineOptions, Hierarchy, Phase
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
from phaseprof.capture.shared.timing import PhaseTiming, TimingStats
from phaseprof.capture.shared.trace_file import DEFAULT_MAX_TRACE_BYTES, TraceFile, finalize_trace
from phaseprof.pareto.records import AsyncScheduling, to_builtins
from phaseprof.records import DeviceRecord, EngineInfo, ModelInfo, ProfileInfo, RunDir, RunRecord, TraceFileInfo
from phaseprof.routing import RoutingRecord, write_routing


@dataclass(frozen=True)
class ServingTiming:
    """A point's clean timing on the serving-default engine (vLLM's own ``async_scheduling``), when that is
    another engine than the marker-friendly one the profiled steps run on. ``reference``: the same requests
    through ``vllm.LLM.generate`` on that engine (vLLM alone), when measured; ``own_process``: that engine ran in
    a process of its own (``serving_child``)."""

    timing: PhaseTiming
    async_scheduling: bool | None
    reference: TimingStats | None = None
    own_process: bool = False


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
    ref = serving.reference
    where = "in a process of its own, ended before the second started" if serving.own_process else "first"
    return AsyncScheduling(timed=serving.async_scheduling, profiled=session.async_scheduling,
                           timed_source=f"vLLM's default (serving engine, {where}); profiled on a second engine "
                                        "with async_scheduling=False", metric=metric, serving_timing_ms=s_ms,
                           marker_timing_ms=m_ms, ratio=round(m_ms / s_ms, 4) if s_ms > 0 else None,
                           vllm_generate_ms=None if ref is None else round(ref.median_ms, 4),
                           vllm_generate_ratio=None if ref is None or ref.median_ms <= 0 else
                           round(s_ms / ref.median_ms, 4))


def _prepared(opts: EngineOptions, *, console: Console,
              announce: bool) -> tuple[EngineOptions, ModelSource, DeviceInfo]:
    """``prepare_engine``'s checks; also the model source and device they resolved (``open_session`` starts the
    engine on them instead of resolving both again)."""
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
    if announce:
        console.print(start_notice(device_kind=device.kind, device_name=device.name, mode=str(opts.mode),
                                   model=name), highlight=False, markup=False)
    return replace(opts, model=name), source, device


def prepare_engine(opts: EngineOptions, *, console: Console, announce: bool = True) -> EngineOptions:
    """The cheap checks before any engine starts: resolve the model (the default preset for this device,
    announced), check device and request size, and tell what is about to start (``start_notice``). ``opts`` with
    the model named."""
    return _prepared(opts, console=console, announce=announce)[0]


def open_session(opts: EngineOptions, *, console: Console, stages: Stages | None = None,
                 output_redirected: bool = False, announce: bool = True) -> EngineSession:
    """Resolve the model, check device and request size (cheap checks first: ``prepare_engine``), then start
    the engine (``stages`` and ``output_redirected``: see ``start_engine``)."""
    opts, source, device = _prepared(opts, console=console, announce=announce)
    return start_engine(source, opts, device=device, console=console, stages=stages,
                        output_redirected=output_redirected)


def memory_needed(opts: EngineOptions, total: int) -> int:
    """Bytes vLLM's start-up check wants free for ``opts``: ``gpu_memory_utilization`` x the device total."""
    util = float(opts.engine_args.get("gpu_memory_utilization", GPU_MEMORY_UTILIZATION))
    return int(util * total)


def marker_session(session: EngineSession, *, console: Console, stages: Stages | None = None,
                   output_redirected: bool = False, probe: MemoryProbe | None = None) -> EngineSession:
    """The engine profiled steps run on: ``session`` itself when its async scheduling is off (the serving
    default on this platform, or asked for), else a second engine with ``async_scheduling=False``, started
    after ``session`` was closed and its memory seen free (one engine's memory at a time; ``probe``: the
    device's free/total bytes, ``torch.cuda.mem_get_info`` on CUDA)."""
    if not session.async_scheduling:
        return session
    opts = replace(session.options, async_scheduling=False)
    session.close()
    if probe is None and session.device.kind == "cuda":
        probe = cuda_mem_info
    if probe is not None:
        wait_until_free(memory_needed(opts, probe()[1]), probe=probe, held_by="the serving-timing engine's "
                        "shutdown (in this process)")
    return open_session(opts, console=console, stages=stages, output_redirected=output_redirected)


@dataclass(frozen=True)
class CaptureEngines:
    """The engine the profiled steps run on, and each point's serving-default timing when another engine
    (in its own process) timed it, keyed by (phase, prompt tokens)."""

    session: EngineSession
    serving: dict[tuple[Phase, int], ServingTiming]


def open_capture_engines(opts: EngineOptions, points: list[CaptureOptions], *, console: Console,
                         stages: Stages, output_redirected: bool, serving_timing: bool, device_kind: str,
                         time_serving: Callable[..., ServingResult] | None = None,
                         open_engine: Callable[..., EngineSession] | None = None,
                         probe: MemoryProbe | None = None, wait_timeout_s: float = 60.0) -> CaptureEngines:
    """Never two engines on the GPU at once. With CUDA and ``serving_timing``: the serving-default engine times
    every point in a process of its own; once that process has ended and the device reports the memory free,
    the marker-friendly engine (``async_scheduling=False``) starts here for the profiled requests. Elsewhere
    (CPU: vLLM turns async scheduling off) one engine here times and profiles; should it resolve async
    scheduling on, it times, is closed, and the marker engine starts after its memory is back. The last three
    arguments replace the child process, the engine start and the memory probe (tests)."""
    time_serving = time_serving or time_in_own_process
    open_engine = open_engine or open_session
    if probe is None and device_kind == "cuda":
        probe = cuda_mem_info
    if serving_timing and device_kind == "cuda" and probe is not None:
        opts = prepare_engine(opts, console=console)
        result = time_serving(replace(opts, async_scheduling=None), points, console=console, stages=stages)
        with stages.stage("GPU memory back from the serving-timing process"):
            wait_until_free(memory_needed(opts, probe()[1]), probe=probe, timeout_s=wait_timeout_s)
        console.print(f"serving-default timing done (vLLM {result.startup_s:.0f} s to start); the profiling "
                      "engine (async scheduling off) starts now", highlight=False)
        session = open_engine(replace(opts, async_scheduling=False), console=console, stages=stages,
                              output_redirected=output_redirected, announce=False)
        serving = {(p.phase, p.prompt_tokens): ServingTiming(t, result.async_scheduling, ref, own_process=True)
                   for p, t, ref in zip(points, result.timings, result.reference, strict=True)}
        return CaptureEngines(session, serving)
    session = open_engine(replace(opts, async_scheduling=None if serving_timing else False), console=console,
                          stages=stages, output_redirected=output_redirected)
    serving = {}
    if session.async_scheduling:  # vLLM serves with it: time here, profile on a marker-friendly engine
        try:
            for p in points:
                serving[(p.phase, p.prompt_tokens)] = ServingTiming(time_phase(session, p, stages=stages),
                                                                    session.async_scheduling)
        except BaseException:
            session.close()
            raise
        session = marker_session(session, console=console, stages=stages, output_redirected=output_redirected,
                                 probe=probe)
    return CaptureEngines(session, serving)


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
        vllm_startup_facts=session.facts,
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
        RunDir(tmp).write(rec)
        make_readable(tmp)
    stages.prefix = ""
    return CaptureResult(run_dir=final, record=rec, timing=serving.timing if serving else timing,
                         overhead_ratio=ratio, breakdowns={} if bd is None else {0: bd}, breakdown_error=err,
                         run=rec.to_dict())
