"""A sweep's run directory: ``sweep.json``, ``plot.json`` (+ ``plot.html`` with plotly), and for
``--profile-at`` one capture directory per chosen length (``profile-<tokens>/``: trace, breakdown, run.json)."""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from phaseprof.capture.engine import EngineSession
from phaseprof.capture.options import CaptureOptions, Phase
from phaseprof.capture.rundir import (
    command_line,
    make_readable,
    run_dir_name,
    run_directory,
    unique_run_dir,
    utc_stamp,
)
from phaseprof.capture.runner import capture_phase
from phaseprof.capture.sweep import (
    DecodePoint,
    PrefillPoint,
    SweepSpec,
    decode_plot_spec,
    decode_sweep,
    prefill_plot_spec,
    prefill_sweep,
    slope_us_per_token,
    write_plot,
)
from phaseprof.records import DeviceRecord, EngineInfo, ModelInfo, SweepRecord


@dataclass(frozen=True)
class SweepRequest:
    """A sweep (``spec``) on this process's engine. ``profile_at``: prefill lengths to also capture with the
    profiler. ``deadline``: time.monotonic() after which remaining points are skipped (recorded as skipped)."""

    spec: SweepSpec
    profile_at: tuple[int, ...] = ()
    deadline: float | None = None


def _header(session: EngineSession, req: SweepRequest, argv: list[str] | None) -> SweepRecord:
    sp = req.spec
    return SweepRecord(
        phase=str(sp.phase), created_utc=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        command=command_line(argv), versions=session.versions, device=DeviceRecord(**session.device.to_dict()),
        model=ModelInfo.of_source(session.source), model_config=session.source.hf_config,
        engine=EngineInfo(kwargs=session.plan.kwargs, env=session.plan.env, notes=list(session.plan.notes),
                          startup_s=round(session.startup_s, 3), mode=str(session.options.mode),
                          quant=str(session.options.quant)),
        vllm_startup_facts=session.facts.to_dict(), reps=sp.reps, warmup=sp.warmup, seed=sp.seed)


def run_sweep(session: EngineSession, req: SweepRequest, *, console: Console,
              argv: list[str] | None = None) -> tuple[Path, dict[str, Any]]:
    """Run the sweep and write its directory atomically. Returns (directory, sweep.json content)."""
    sp = req.spec
    final = unique_run_dir(sp.out, run_dir_name(device_slug=session.device.slug, model_slug=session.source.slug,
                                                phase=f"sweep-{sp.phase}", tokens=sp.label, stamp=utc_stamp()))
    rec = _header(session, req, argv)
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
            rec = replace(rec, points=[p.to_dict() for p in points], skipped=list(skipped),
                          slope_us_per_token=slope_us_per_token(points),
                          profiles=_profiles(session, req, tmp, console, argv))
        else:
            with console.status("Decode sweep") as st:
                points_d, skipped = decode_sweep(
                    session, list(sp.concurrency), prompt_tokens=sp.prompt_tokens,
                    output_tokens=sp.output_tokens, reps=sp.reps, warmup=sp.warmup, seed=sp.seed,
                    deadline=req.deadline,
                    on_point=lambda p: st.update(f"Decode sweep: c={p.concurrency} TPOT {p.tpot.median_ms:.2f} ms"))
            rec = replace(rec, points=[p.to_dict() for p in points_d], skipped=list(skipped))
            spec = decode_plot_spec(points_d, title=f"Decode TPOT and throughput — {title}")
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
        opts = CaptureOptions(phase=Phase.PREFILL, tokens=n, reps=sp.reps, warmup=sp.warmup, seed=sp.seed, out=tmp)
        res = capture_phase(session, opts, console=console, argv=argv, run_dir=tmp / f"profile-{n}")
        out[str(n)] = {"dir": f"profile-{n}", "overhead_ratio": res.overhead_ratio,
                       "breakdown": res.run["breakdown"], "breakdown_error": res.breakdown_error}
    return out


def print_sweep(doc: dict[str, Any], console: Console) -> None:
    """The sweep's table (one row per point)."""
    table = Table(title=f"{doc['phase']} sweep · {doc['model']['name']} · {doc['device']['name']}")
    if doc["phase"] == "prefill":
        for col in ("prompt tokens", "TTFT median ms", "p10", "p90", "source"):
            table.add_column(col, justify="right")
        for p in doc["points"]:
            t = p["ttft"]
            table.add_row(str(p["prompt_tokens"]), f"{t['median_ms']:.2f}", f"{t['p10_ms']:.2f}",
                          f"{t['p90_ms']:.2f}", p["source"])
    else:
        for col in ("concurrency", "TPOT median ms", "p10", "p90", "output tok/s", "decode tok/s"):
            table.add_column(col, justify="right")
        for p in doc["points"]:
            t = p["tpot"]
            table.add_row(str(p["concurrency"]), f"{t['median_ms']:.2f}", f"{t['p10_ms']:.2f}",
                          f"{t['p90_ms']:.2f}", f"{p['output_tok_per_s']['median']:.1f}",
                          f"{p['decode_tok_per_s']:.1f}")
    console.print(table)


__all__ = ["DecodePoint", "PrefillPoint", "SweepRequest", "SweepSpec", "print_sweep", "run_sweep"]
