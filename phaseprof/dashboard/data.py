"""Cached loading for the dashboard. Every number comes from phaseprof's library; this module only caches it.

Cache keys are file *content* hashes (sha256) with the file's path (so a result names the file it came
from): a touched-but-unchanged file is not analysed again, a changed one is. The hash itself is memoised by
(path, size, mtime), so an interaction costs a ``stat``, not a re-read. Parsed trace tables are held once per
trace (``st.cache_resource``, not copied); results (breakdowns, step timelines) are small and live in
``st.cache_data``. Failures are cached too (as their one-line message), so a bad 100 MB file is not re-parsed
on every click.
"""

from __future__ import annotations

import hashlib
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import streamlit as st

from phaseprof.analysis.results import Breakdown
from phaseprof.dashboard.sources import (ADDED_PATHS, Kind, Roots, Source, added_key, file_source, guard,
                                         guard_members, iso_time, scan)
from phaseprof.dashboard.text import md
from phaseprof.errors import PhaseprofError
from phaseprof.records import RecordOnly, RunDir, RunRecord, record_only as _record_only

#: Traces at least this big show a step-by-step progress box while they are analysed.
BIG_TRACE_BYTES = 100 * 1024 * 1024
DEFAULT_MAX_UPLOAD_MB = 512


@dataclass(frozen=True)
class Context:
    """What every page gets: where it may read from, and the upload cap."""

    roots: Roots
    max_upload_mb: int = DEFAULT_MAX_UPLOAD_MB

    @property
    def runs_dir(self) -> Path:
        return self.roots.runs_dir


@st.cache_resource(show_spinner=False)
def upload_dir() -> Path:
    """This server's private upload directory (one per process, removed with the temp dir)."""
    return Path(tempfile.mkdtemp(prefix="phaseprof-uploads-"))


# ----------------------------------------------------------------------------------------------- hashing
@st.cache_data(show_spinner=False, max_entries=4096)
def _sha256(path: str, size: int, mtime_ns: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def sha256_of(path: Path) -> str:
    s = path.stat()
    return _sha256(str(path), s.st_size, s.st_mtime_ns)


def _key(src: Source) -> str:
    """Content key of everything a source's breakdown is made from."""
    main = src.breakdown if src.breakdown is not None else src.trace
    files = [f for f in (main, src.run_json) if f is not None]
    return "+".join(sha256_of(f) for f in files)


# ------------------------------------------------------------------------------------------- the caches
def _raise(value: Any) -> Any:
    if isinstance(value, _Failed):
        raise PhaseprofError(value.message)
    return value


@dataclass(frozen=True)
class _Failed:
    message: str


@st.cache_resource(show_spinner=False, max_entries=2)
def _tables(sha: str, path: str) -> Any:
    from phaseprof.trace.read import load_tables

    try:
        return load_tables(path)
    except PhaseprofError as e:
        return _Failed(str(e))


@st.cache_resource(show_spinner=False, max_entries=2)
def _analysed_trace(sha: str, path: str) -> Any:
    """The trace through ``analysis.pipeline.analyze`` once: breakdown, kernel order and timeline index all
    come from this one object."""
    from phaseprof.analysis.pipeline import analyze

    try:
        return analyze(_raise(_tables(sha, path)))
    except PhaseprofError as e:
        return _Failed(str(e))


@st.cache_data(show_spinner=False, max_entries=64)
def _trace_breakdown(sha: str, path: str) -> Breakdown | _Failed:
    result = _analysed_trace(sha, path)
    return result if isinstance(result, _Failed) else result.breakdown


@st.cache_data(show_spinner=False, max_entries=256)
def _stored_breakdown(key: str, path: str) -> Breakdown | _Failed:
    """A breakdown JSON, or a run directory through ``phaseprof diff``'s loader (breakdown.json + run.json)."""
    from phaseprof.report.diff import load_side

    try:
        return load_side(path).breakdown
    except PhaseprofError as e:
        return _Failed(str(e))


@st.cache_data(show_spinner=False, max_entries=64)
def _run_json(sha: str, path: str) -> RunRecord | _Failed:
    try:
        return RunRecord.read(Path(path))
    except PhaseprofError as e:
        return _Failed(str(e))


@st.cache_data(show_spinner=False, max_entries=64)
def _kernel_order(sha: str, path: str) -> Any:
    return _raise(_analysed_trace(sha, path)).kernel_order


def _timeline_index(sha: str, path: str) -> Any:
    return _raise(_analysed_trace(sha, path)).timeline


@st.cache_data(show_spinner=False, max_entries=64)
def _step_timeline(sha: str, path: str, step: int) -> Any:
    from phaseprof.analysis.timeline import step_timeline

    return step_timeline(_timeline_index(sha, path), step=step)


@st.cache_resource(show_spinner=False)
def _analysed() -> dict[str, Breakdown | _Failed]:
    """Content key -> breakdown (or failure) of every source analysed so far in this server (for the Runs
    table, and to show a progress box only when a trace really gets parsed)."""
    return {}


# ------------------------------------------------------------------------------------------ public API
def _trace_path(src: Source, roots: Roots) -> str:
    if src.trace is None:
        raise PhaseprofError("has no trace (only a breakdown): the timeline needs the raw trace", path=src.path)
    return str(guard(src.trace, roots))


def _with_progress(src: Source, sha: str, path: str) -> Breakdown | _Failed:
    size_mb = src.size_bytes / 1e6
    with st.status(f"Analysing {md(src.name)} ({size_mb:,.0f} MB)…",
                   expanded=src.size_bytes >= BIG_TRACE_BYTES) as box:
        box.write("Reading, decompressing and decoding the trace…")
        tables = _tables(sha, path)
        if not isinstance(tables, _Failed):
            box.write(f"{tables.meta.event_count:,} events. Correlating launches, finding steps, "
                      "classifying kernels…")
        result = _trace_breakdown(sha, path)
        failed = isinstance(result, _Failed)
        box.update(label=f"Could not analyse {md(src.name)}" if failed else f"Analysed {md(src.name)}",
                   state="error" if failed else "complete", expanded=False)
    return result


def breakdown(src: Source, roots: Roots) -> Breakdown:
    """The source's breakdown: a run directory's ``breakdown.json`` (with its ``run.json``), a breakdown
    file, or the analysis of a trace (``analyze_trace``'s steps). Raises PhaseprofError on a bad file."""
    if src.kind == Kind.RUN and src.trace is None and src.breakdown is None and src.run_json is None:
        raise PhaseprofError("no trace, breakdown.json or run.json inside the runs directory here (links leading "
                             "outside it are not followed)", path=src.path)
    only = record_only(src, roots)
    if only is not None:  # as `phaseprof analyze` of it says
        raise PhaseprofError(only.line, path=src.path)
    for f in (src.trace, src.breakdown, src.run_json):
        if f is not None:
            guard(f, roots)  # each file, not only its directory: a run directory may hold links to elsewhere
    reg = _analysed()
    key = _key(src)
    if src.kind == Kind.TRACE or (src.kind == Kind.RUN and src.breakdown is None):
        path = _trace_path(src, roots)
        sha = sha256_of(Path(path))
        result = _trace_breakdown(sha, path) if key in reg else _with_progress(src, sha, path)
    else:
        path = guard(src.path, roots)
        if path.is_dir():
            guard_members(path, ("breakdown.json", RunDir.RECORD), roots)  # what load_side opens there
        result = _stored_breakdown(key, str(path))
    if isinstance(result, _Failed):
        reg[key] = result
        raise PhaseprofError(result.message)
    bd = result
    if src.kind == Kind.RUN and src.breakdown is None and src.run_json is not None:
        bd = replace(bd, capture=run_json(src, roots))  # as `phaseprof diff` reads run dirs
    reg[key] = bd
    return bd


def cached_breakdown(src: Source) -> Breakdown | str | None:
    """The breakdown if this server has already computed it, its error message if that failed, else None
    (never analyses)."""
    try:
        hit = _analysed().get(_key(src))
    except OSError:
        return None
    return hit.message if isinstance(hit, _Failed) else hit


def run_json(src: Source, roots: Roots) -> RunRecord | None:
    """The run directory's run.json, typed; None without one."""
    if src.run_json is None:
        return None
    path = guard(src.run_json, roots)
    return _raise(_run_json(sha256_of(path), str(path)))


def record_only(src: Source, roots: Roots) -> RecordOnly | None:
    """A run directory that keeps only its record (run.json; no trace, no breakdown.json; not a PD run) as
    ``phaseprof analyze`` of it reads it (``records.record_only``: what the record is, which files it names were
    not kept), else None. PhaseprofError (one line) when its run.json does not read."""
    if src.kind != Kind.RUN or src.trace is not None or src.breakdown is not None or src.run_json is None:
        return None
    rec = run_json(src, roots)
    return None if rec is None or rec.kind == "pd" else _record_only(guard(src.path, roots), rec)


def kernel_order(src: Source, roots: Roots) -> Any:
    """Each kernel's order in its step (for kernel matching in diffs); None without a raw trace."""
    if src.trace is None or src.breakdown is not None:
        return None  # `phaseprof diff` also ranks by time when it reads a stored breakdown
    path = _trace_path(src, roots)
    return _kernel_order(sha256_of(Path(path)), path)


def step_timeline(src: Source, roots: Roots, step: int) -> Any:
    path = _trace_path(src, roots)
    sha = sha256_of(Path(path))
    breakdown(src, roots)  # parse once, with progress, before indexing
    with st.spinner("Laying out the step…"):
        return _step_timeline(sha, path, step)


@st.cache_data(show_spinner=False, ttl=5)
def _scan(runs_dir: str, uploads: str) -> tuple[list[Source], list[Path]]:
    sources, sweeps = scan(Path(runs_dir))
    up, _ = scan(Path(uploads), prefix="upload/", every_file=True)
    return sources + up, sweeps


def rescan() -> None:
    """Forget the directory listing (after an upload or an added path)."""
    _scan.clear()


def sources(ctx: Context) -> list[Source]:
    """Everything under the runs directory and the uploads, plus files added by path in this session."""
    found, _ = _scan(str(ctx.runs_dir), str(ctx.roots.upload_dir))
    keys = {s.key for s in found}
    added = []
    for p in st.session_state.get(ADDED_PATHS, []):
        key = added_key(Path(p), ctx.roots)
        if key not in keys and Path(p).is_file():
            added.append(file_source(guard(p, ctx.roots), key))
    return found + added


def sweeps(ctx: Context) -> list[Path]:
    return _scan(str(ctx.runs_dir), str(ctx.roots.upload_dir))[1]


def facts(src: Source, bd: Breakdown | None, run: RunRecord | None) -> dict[str, Any]:
    """One row of the Runs table: what the run is, from run.json, else the capture facts the trace embedded
    (``bd.capture``), else the breakdown. TTFT and TPOT are the clean (profiler-off) medians the capture
    measured, as ``phaseprof diff`` reads them."""
    rec = run or (bd.capture if bd else None)
    phase = rec.request.phase if rec else None
    date = rec.created_utc if rec else None
    return {
        "run": src.key, "kind": src.kind,
        "GPU": (bd.trace.gpu_name or bd.trace.platform) if bd else rec.device.name if rec else None,
        "model": rec.model.name if rec else None,
        "phase": phase or (", ".join(p.phase for p in bd.phases) if bd else None),
        "tokens": rec.request.prompt_tokens if rec else None, "mode": rec.execution_mode if rec else None,
        "quant": quant(rec),
        "TTFT ms": rec.ttft_ms if rec else None, "TPOT ms": rec.tpot_ms if rec else None,
        "steps": ", ".join(f"{p.phase} ×{p.steps}" for p in bd.phases) if bd else None,
        "date": str(date) if date is not None else iso_time(src.mtime),
        "size MB": round(src.size_bytes / 1e6, 1), "what": src.description or None,
    }


def quant(rec: RunRecord | None) -> str | None:
    """The weights' quantization the capture recorded ("bf16", "fp8"), None when it recorded none."""
    return (rec.quant or rec.engine.quant) if rec else None


def step_export(src: Source, roots: Roots, step: int, window_us: tuple[float, float] | None = None) -> Any:
    """Step ``step`` of the source's trace (or a window of it, µs since the step's start) as a small
    ``.pt.trace.json.gz`` (``phaseprof.analysis.step_export``); called only when the user asks for it."""
    from phaseprof.analysis.step_export import export_step

    path = _trace_path(src, roots)
    return export_step(path, _timeline_index(sha256_of(Path(path)), path), step, window_us=window_us)


@st.cache_data(show_spinner=False, max_entries=64)
def _speed_of_light(key: str, sha: str, path: str) -> Any:
    """The analysed trace's own ``sol`` (``sol.attach.analysed_sol``). The section also reads run.json beside the
    trace, as it was when this server first analysed the trace (a capture writes both at once)."""
    try:
        from phaseprof.sol.attach import analysed_sol

        return analysed_sol(_raise(_analysed_trace(sha, path)))
    except PhaseprofError as e:
        return _Failed(str(e))


@st.cache_data(show_spinner=False, max_entries=64)
def _stored_sol(key: str, path: str, _bd: Breakdown) -> Any:
    """A stored breakdown without a ``sol`` section (older captures wrote none): its section now."""
    from phaseprof.sol.attach import sol_of

    try:
        return sol_of(_bd, source=path)
    except PhaseprofError as e:
        return _Failed(str(e))


def speed_of_light(src: Source, bd: Breakdown, roots: Roots) -> Any:
    """The breakdown's ``sol`` section, as ``phaseprof analyze`` of the same run prints it: a trace's
    from its ``AnalysedTrace``, a stored breakdown's own (or, written without one, computed from it the same
    way). A SolSection, or _Failed."""
    if bd.sol is not None:
        return bd.sol
    if src.kind == Kind.TRACE or (src.kind == Kind.RUN and src.breakdown is None and src.trace is not None):
        path = _trace_path(src, roots)
        return _speed_of_light(_key(src), sha256_of(Path(path)), path)
    return _stored_sol(_key(src), str(src.path), bd)


def verdicts(src: Source, bd: Breakdown, roots: Roots) -> Any:
    """What to look at first (``analysis.verdict``): the breakdown's own ``verdicts`` section when it was written
    with one, else ``verdicts_of`` the breakdown with its speed of light (when there is one) and the run's
    run.json, as ``phaseprof analyze`` attaches them (``sol.attach.reported``)."""
    from phaseprof.analysis.verdict import verdicts_of

    if bd.verdicts is not None:
        return bd.verdicts
    sol = speed_of_light(src, bd, roots)
    if bd.sol is None and not isinstance(sol, _Failed) and sol.ok:
        bd = replace(bd, sol=sol)
    return verdicts_of(bd, run=run_json(src, roots))



# ------------------------------------------------------------------------------- disaggregated (PD) runs
def is_pd(src: Source, roots: Roots) -> bool:
    """Whether the source is a disaggregated (PD) run directory: its run.json (typed, cached) has kind ``pd``
    (as ``phaseprof analyze`` tells one). A run.json that does not read is no PD run."""
    if src.kind != Kind.RUN or src.run_json is None:
        return False
    try:
        rec = run_json(src, roots)
    except PhaseprofError:
        return False
    return rec is not None and rec.kind == "pd"


def pd_files(src: Source, roots: Roots) -> list[Path]:
    """The files ``disagg.run.read_pd_run`` opens in the run directory (run.json, its handoff record, each side's
    breakdown that is there), each guarded inside the roots: a link leading out refuses the whole run."""
    d = guard(src.path, roots)
    rec = run_json(src, roots)
    if rec is None or rec.kind != "pd" or rec.disagg is None:
        raise PhaseprofError("not a disaggregated (PD) run: run.json has no kind 'pd' and disagg section",
                             path=RunDir(d).record_file)
    rels = [rec.disagg.handoff or "handoff.json", rec.disagg.prefill.breakdown, rec.disagg.decode.breakdown]
    files = [guard(RunDir(d).record_file, roots), guard(d / rels[0], roots)]  # handoff.json: the run has none without it
    for rel in rels[1:]:
        f = d / rel if rel else None
        if f is not None and (f.is_symlink() or f.exists()):
            files.append(guard(f, roots))
    return files


@st.cache_data(show_spinner=False, max_entries=32)
def _pd_run(key: str, path: str) -> Any:
    from phaseprof.disagg.run import read_pd_run

    try:
        return read_pd_run(Path(path))
    except PhaseprofError as e:
        return _Failed(str(e))


def pd_run(src: Source, roots: Roots) -> Any:
    """The PD run directory read once (``disagg.run.read_pd_run``, a ``PdRun``), cached by the content of every
    file it reads; PhaseprofError (one line) when it is not one or a file of it is bad."""
    files = pd_files(src, roots)
    return _raise(_pd_run("+".join(sha256_of(f) for f in files), str(guard(src.path, roots))))
