"""A disaggregated (PD) run directory read once: its run.json, handoff.json and both engines' breakdowns, and the
profiled request's timeline derived from them. ``phaseprof analyze RUN`` and the dashboard's PD page both take
this object (``PdRun``) and compute nothing of their own."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from phaseprof.disagg.records import HandoffReport, ProfiledTimeline, read_handoff
from phaseprof.errors import PhaseprofError
from phaseprof.records import RunDir, RunRecord


@dataclass(frozen=True)
class PdRun:
    """``directory``: the run; ``record``: run.json (kind ``pd``); ``handoff``: handoff.json; ``prefill`` /
    ``decode``: each engine's stored breakdown (None when it has none: ``errors`` says why); ``timeline``: the
    profiled request's TTFT laid out (None when it cannot be: ``timeline_note``)."""

    directory: Path
    record: RunRecord
    handoff: HandoffReport
    prefill: Any
    decode: Any
    errors: dict[str, str]
    timeline: ProfiledTimeline | None
    timeline_note: str | None


def run_file(directory: Path, rel: str, what: str) -> Path:
    """``directory / rel`` for a path a PD run's run.json names (``what``: the field), confined to the run
    directory: a relative path without ``..`` whose target, links followed, lies inside it. Anything else (an
    absolute path, ``../../etc/passwd``, a link leading out) is one PhaseprofError naming run.json and the path,
    before anything is opened."""
    from phaseprof.safe_text import plain  # noqa: PLC0415

    p = Path(rel)
    shown = plain(rel)[:200]
    if not rel or p.is_absolute() or ".." in p.parts or "\0" in rel:
        raise PhaseprofError(f"{what} {shown!r} is not a path inside the run directory", path=RunDir(directory).record_file)
    path = directory / p
    root = directory.resolve()
    try:
        inside = path.resolve().is_relative_to(root) and path.resolve() != root
    except (OSError, RuntimeError):  # a link loop
        inside = False
    if not inside:
        raise PhaseprofError(f"{what} {shown!r} leads out of the run directory", path=RunDir(directory).record_file)
    return path


def _breakdown(directory: Path, rel: str | None, err: str | None, what: str) -> tuple[Any, str | None]:
    from phaseprof.report.json_io import load_breakdown  # noqa: PLC0415

    if rel is None:
        return None, err or "no breakdown was written"
    try:
        return load_breakdown(run_file(directory, rel, what)), None
    except PhaseprofError as e:
        return None, str(e)


def timeline(h: HandoffReport, prefill: Any, decode: Any) -> tuple[ProfiledTimeline | None, str | None]:
    """The profiled request's TTFT laid out over both traces (``ProfiledTimeline``), or (None, why not)."""
    profiled = [r for r in h.requests if r.profiled]
    if len(profiled) != 1:
        return None, f"{len(profiled)} profiled requests: the traces' steps cannot be told apart per request"
    if prefill is None or decode is None:
        return None, "a breakdown is missing"
    p_steps = [s for s in prefill.steps if s.phase == "prefill"]
    d_steps = sorted(decode.steps, key=lambda s: s.start_us)
    if not p_steps or not d_steps:
        return None, "no prefill step in the prefill trace, or no step in the decode trace"
    r, first = profiled[0], d_steps[0]
    p_ms = sum(s.wall_us for s in p_steps) / 1e3
    xfer = r.nixl.xfer_ms if r.nixl is not None and r.nixl.transfers else None
    d_ms = first.wall_us / 1e3
    other = r.ttft_ms - p_ms - (xfer or 0.0) - d_ms
    if other < 0:  # the parts are not of this request's TTFT (another run's traces, a clock that jumped)
        return None, (f"the traced parts ({r.ttft_ms - other:.2f} ms) exceed the request's measured TTFT "
                      f"({r.ttft_ms:.2f} ms): not laid out")
    return ProfiledTimeline(request=r.index, ttft_ms=r.ttft_ms, prefill_step_ms=p_ms,
                            prefill_gpu_ms=sum(s.gpu_busy_us for s in p_steps) / 1e3, prefill_steps=len(p_steps),
                            xfer_ms=xfer, decode_first_step_ms=d_ms, decode_first_gpu_ms=first.gpu_busy_us / 1e3,
                            decode_first_step_tokens=first.context_tokens, other_ms=other), None


def read_pd_run(directory: Path, record: RunRecord | None = None) -> PdRun:
    """The PD run in ``directory``; one PhaseprofError naming the file when run.json or handoff.json is not a
    PD run's. ``record``: its run.json when the caller has read it already (``phaseprof analyze`` reads it to
    tell a PD run from others), so the file is parsed once."""
    rec = record if record is not None else RunDir(directory).record
    if rec.kind != "pd" or rec.disagg is None:
        raise PhaseprofError("not a disaggregated (PD) run: run.json has no kind 'pd' and disagg section",
                             path=RunDir(directory).record_file)
    h = read_handoff(run_file(directory, rec.disagg.handoff or "handoff.json", "disagg.handoff"))
    errors: dict[str, str] = {}
    sides = {}
    for name, side in (("prefill", rec.disagg.prefill), ("decode", rec.disagg.decode)):
        bd, err = _breakdown(directory, side.breakdown, side.breakdown_error, f"disagg.{name}.breakdown")
        sides[name] = bd
        if err:
            errors[name] = err
    tl, note = timeline(h, sides["prefill"], sides["decode"])
    return PdRun(directory=directory, record=rec, handoff=h, prefill=sides["prefill"], decode=sides["decode"],
                 errors=errors, timeline=tl, timeline_note=note)
