"""A sweep's run directory: ``sweep.json``, ``plot.json`` (+ ``plot.html`` with plotly), and for
``--profile-at`` one capture directory per chosen length (``profile-<tokens>/``) or concurrency
(``profile-c<N>/``: a few decode steps at that batch size): trace, breakdown, run.json.

Timed points run on the engine as vLLM serves (its default ``async_scheduling``); profiles run on a
marker-friendly engine (``async_scheduling=False``): the same one when vLLM's default is already off, else a
second engine started after the first was closed, which also times each profiled point (both numbers and the
ratio in its run.json)."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import msgspec
from rich.console import Console

from phaseprof.capture.inprocess.engine import EngineSession, explain_engine_error
from phaseprof.capture.inprocess.runner import ServingTiming, capture_phase
from phaseprof.capture.inprocess.sweep import decode_sweep, prefill_sweep
from phaseprof.capture.shared.options import CaptureOptions, Phase
from phaseprof.capture.shared.rundir import (
    command_line,
    make_readable,
    run_dir_name,
    run_directory,
    unique_run_dir,
    utc_stamp,
)
from phaseprof.capture.shared.sweep import (
    DecodePoint,
    SweepSpec,
    decode_plot_spec,
    prefill_plot_spec,
    slope_us_per_token,
    world_size_of,
    write_plot,
)
from phaseprof.errors import PhaseprofError
from phaseprof.pareto.records import AsyncScheduling, to_builtins
from phaseprof.records import DeviceRecord, EngineInfo, ModelInfo, SweepPoint, SweepRecord


@dataclass(frozen=True)
class SweepRequest:
    """A sweep (``spec``) on this process's engine. ``profile_at``: prefill lengths or decode concurrencies to
    also capture with the profiler. ``deadline``: time.monotonic() after which remaining points are skipped
    (recorded as skipped)."""

    spec: SweepSpec
    profile_at: tuple[int, ...] = ()
    deadline: float | None = None
    profile_steps: int = 4  # decode --profile-at: decode steps under the profiler at each point


def _header(session: EngineSession, req: SweepRequest, argv: list[str] | None) -> SweepRecord:
    sp = req.spec
    return SweepRecord(
        phase=str(sp.phase), created_utc=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        command=command_line(argv), versions=session.versions, device=DeviceRecord(**session.device.to_dict()),
        model=ModelInfo.of_source(session.source), model_config=session.source.hf_config,
        engine=EngineInfo(kwargs=session.plan.kwargs, env=session.plan.env, notes=list(session.plan.notes),
                          startup_s=round(session.startup_s, 3), mode=str(session.options.mode),
                          quant=str(session.options.quant), world_size=world_size_of(session.plan.kwargs)),
        vllm_startup_facts=session.facts, reps=sp.reps, warmup=sp.warmup, seed=sp.seed)


def run_sweep(session: EngineSession, req: SweepRequest, *, console: Console,
              argv: list[str] | None = None,
              marker: Callable[[EngineSession], EngineSession] | None = None) -> tuple[Path, dict[str, Any]]:
    """Run the sweep and write its directory atomically. Returns (directory, sweep.json content).
    ``marker(session)``: the engine the profiles run on (``runner.marker_session``; the caller closes what it
    returns); without it they run on ``session``."""
    sp = req.spec
    final = unique_run_dir(sp.out, run_dir_name(device_slug=session.device.slug, model_slug=session.source.slug,
                                                phase=f"sweep-{sp.phase}", tokens=sp.label, stamp=utc_stamp()))
    rec = _header(session, req, argv)
    timed = AsyncScheduling(timed=session.async_scheduling, profiled=None, refused=session.async_refusal(),
                            timed_source="vLLM's default (serving engine)" if session.options.async_scheduling is None
                            else f"async_scheduling={session.options.async_scheduling} (asked for)")
    prof_session = session
    t0 = time.perf_counter()
    with run_directory(final) as tmp:
        title = f"{session.source.name} on {session.device.name} ({session.options.mode})"
        if sp.phase is Phase.PREFILL:
            with console.status("Prefill sweep") as st:
                points, skipped = prefill_sweep(
                    session, list(sp.lengths), reps=sp.reps, warmup=sp.warmup, seed=sp.seed,
                    deadline=req.deadline,
                    on_point=lambda p: st.update(f"Prefill sweep: {p.prompt_tokens} tokens "
                                                 f"TTFT {p.ttft.median_ms:.2f} ms"))
            spec = prefill_plot_spec(points, title=f"TTFT vs prompt length — {title}")
            prof_session = marker(session) if marker and req.profile_at else session
            rec = replace(rec, points=[SweepPoint.from_dict(p.to_dict()) for p in points], skipped=list(skipped),
                          slope_us_per_token=slope_us_per_token(points),
                          profiles=_profiles(prof_session, req, tmp, console, argv))
        else:
            with console.status("Decode sweep") as st:
                points_d, skipped = decode_sweep(
                    session, list(sp.concurrency), prompt_tokens=sp.prompt_tokens,
                    output_tokens=sp.output_tokens, reps=sp.reps, warmup=sp.warmup, seed=sp.seed,
                    deadline=req.deadline,
                    on_point=lambda p: st.update(f"Decode sweep: c={p.concurrency} TPOT {p.tpot.median_ms:.2f} ms"))
            rec = replace(rec, points=[SweepPoint.from_dict(p.to_dict()) for p in points_d], skipped=list(skipped))
            spec = decode_plot_spec(points_d, title=f"Decode TPOT and throughput — {title}")
            if req.profile_at:
                try:
                    prof_session = marker(session) if marker else session
                except PhaseprofError as e:  # the timed points stay: a sweep.json without its profiles
                    rec = replace(rec, profiles={str(c): {"error": f"marker-friendly engine: {e}"}
                                                 for c in req.profile_at})
                else:
                    rec = replace(rec, profiles=_decode_profiles(prof_session, req, points_d, timed.timed, tmp,
                                                                 console, argv))
        timed = msgspec.structs.replace(timed, profiled=prof_session.async_scheduling if req.profile_at else None)
        rec = replace(rec, engine=replace(rec.engine, async_scheduling=to_builtins(timed)))
        rec = replace(rec, plot_files=write_plot(spec, tmp), elapsed_s=round(time.perf_counter() - t0, 3))
        rec.write(tmp / "sweep.json")
        make_readable(tmp)
    return final, rec.to_dict()


def _profiles(session: EngineSession, req: SweepRequest, tmp: Path, console: Console,
              argv: list[str] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    sp = req.spec
    for n in req.profile_at:
        if req.deadline is not None and time.monotonic() > req.deadline:
            out[str(n)] = {"skipped": "deadline"}
            continue
        opts = CaptureOptions(phase=Phase.PREFILL, prompt_tokens=n, reps=sp.reps, warmup=sp.warmup, seed=sp.seed,
                              out=tmp)
        res = capture_phase(session, opts, console=console, argv=argv, run_dir=tmp / f"profile-{n}")
        out[str(n)] = {"dir": f"profile-{n}", "overhead_ratio": res.overhead_ratio,
                       "breakdown": res.record.breakdown, "breakdown_error": res.breakdown_error}
    return out


def _decode_profiles(session: EngineSession, req: SweepRequest, points: list[DecodePoint],
                     timed_async: bool | None, tmp: Path, console: Console,
                     argv: list[str] | None) -> dict[str, Any]:
    """One capture per ``--profile-at`` concurrency: the point timed again on ``session`` (the marker-friendly
    engine) and ``req.profile_steps`` decode steps profiled at that batch size (prefill steps left out)."""
    out: dict[str, Any] = {}
    sp = req.spec
    by_c = {p.concurrency: p for p in points}
    for c in req.profile_at:
        if req.deadline is not None and time.monotonic() > req.deadline:
            out[str(c)] = {"skipped": "deadline"}
            continue
        point = by_c.get(c)
        serving = None
        if point is not None and point.timing is not None and session.async_scheduling != timed_async:
            serving = ServingTiming(point.timing, timed_async)
        opts = CaptureOptions(phase=Phase.DECODE, prompt_tokens=sp.prompt_tokens, output_tokens=sp.output_tokens,
                              reps=sp.reps, warmup=sp.warmup, seed=sp.seed, out=tmp, concurrency=c,
                              profile_decode_steps=req.profile_steps)
        try:
            res = capture_phase(session, opts, console=console, argv=argv, run_dir=tmp / f"profile-c{c}",
                                serving=serving, decode_only=True)
        except Exception as e:  # noqa: BLE001 - one profile lost, the sweep and the other profiles kept
            err = e if isinstance(e, PhaseprofError) else explain_engine_error(e, session.plan)
            out[str(c)] = {"error": str(err)}
            continue
        out[str(c)] = {"dir": f"profile-c{c}", "overhead_ratio": res.overhead_ratio,
                       "breakdown": res.record.breakdown, "breakdown_error": res.breakdown_error,
                       "async_scheduling": res.record.engine.async_scheduling}
    return out


__all__ = ["SweepRequest", "run_sweep"]
