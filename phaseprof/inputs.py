"""What a path given to phaseprof means: a trace, a breakdown JSON, a run directory, a directory of rank traces
or a sweep. Decided here once for ``phaseprof analyze``, ``phaseprof diff``, the rank analysis and the dashboard.

Rules, in order (``file_kind``: the one classifier of files, which the dashboard's listing uses too):

- a file: ``sweep.json`` is a sweep; a JSON whose first 4 KiB hold a string ``"schema_version"`` ("1.4"), name
  phaseprof as its writer (``"tool": {"name": "phaseprof"``) and hold no ``"traceEvents"`` (uncompressed:
  phaseprof writes breakdowns plain) is a breakdown; a file named as one of phaseprof's records
  (``RECORD_FILES``: run.json, plot.json, ...) is neither; else a trace by its content (below). A file given
  on its own that is none of these is taken as a trace, so the loader names what is wrong with it (records such
  as run.json number their schema with an integer: stored compact, theirs falls in the 4 KiB);
- a directory with ``sweep.json`` is a sweep;
- a directory with two or more trace files directly inside (vLLM's profiler writes one per TP/EP rank), or a
  ``ranks/`` sub-directory holding them (``phaseprof capture --tensor-parallel-size``), is a rank directory;
- a directory with a trace, ``breakdown.json`` or ``run.json`` is a run directory (``phaseprof capture``).

Inside a directory a ``*.json`` / ``*.json.gz`` file is a trace by its content, not its name (public traces
are named anything; a run's ``config.json``, ``tp_run.json``, ``result.json`` sit beside rank traces): its
first ``PEEK_BYTES`` (decompressed) hold ``"traceEvents"``, open with Kineto's header key, or open a
Chrome-format event array. A file whose head cannot be read (bad gzip, no permission) counts as a trace, so
the loader names the problem instead of the file vanishing. Errors for a directory without traces name the
JSON files skipped.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from phaseprof.errors import PhaseprofError
from phaseprof.records import RunDir

#: The names ``phaseprof capture`` gives a run directory's trace, preferred first.
TRACE_NAMES = ("trace.json.gz", "trace.json")
#: A run directory's trace, in order of preference.
TRACE_GLOBS = (*TRACE_NAMES, "*.pt.trace.json.gz", "*.trace.json.gz", "*.json.gz")
TRACE_SUFFIXES = (".json", ".json.gz")
SWEEP_NAME = "sweep.json"
BREAKDOWN_NAME = "breakdown.json"
#: JSON files (name endings) that are neither traces nor breakdowns: phaseprof's records, a sweep's plot data,
#: JSON Schemas, package metadata.
RECORD_FILES = (RunDir.RECORD, SWEEP_NAME, "plot.json", ".schema.json", "MANIFEST.json", "package.json")
#: JSON files that are never traces.
NOT_TRACES = (BREAKDOWN_NAME, *RECORD_FILES)
#: Files whose presence makes a directory one run (``phaseprof capture``'s run directory); ``resolve`` also
#: finds a run's trace by content (``find_trace``).
RUN_MARKERS = (RunDir.RECORD, BREAKDOWN_NAME, *TRACE_NAMES)
#: Bytes of a file's (decompressed) start read to tell a trace from other JSON. Kineto writes its header
#: first; ``deviceProperties`` of 8 GPUs is ~6 KB, so ``schemaVersion``/``traceEvents`` fall well inside.
PEEK_BYTES = 64 * 1024
#: A trace's head: the event list's key anywhere in it (no other JSON phaseprof meets holds it), or a first
#: key of Kineto's header (a breakdown repeats ``schemaVersion``, but nested), or a Chrome-format event array.
TRACE_KEY = b'"traceEvents"'
KINETO_START = re.compile(rb'\A\s*\{\s*"(?:schemaVersion|deviceProperties|traceEvents)"')
EVENT_ARRAY_START = re.compile(rb'\A\s*\[\s*\{')


class InputKind(StrEnum):
    TRACE = "trace"  # a Kineto trace file (.json / .json.gz)
    BREAKDOWN = "breakdown"  # a breakdown JSON written by phaseprof
    RUN = "run"  # a run directory: trace and/or breakdown.json and/or run.json
    RANKS = "ranks"  # several rank traces of one distributed run
    SWEEP = "sweep"  # a sweep: sweep.json or its directory


@dataclass(frozen=True)
class Input:
    """A resolved path. ``trace``: the trace to analyse (for ``RANKS``, the first rank's); ``rank_traces``:
    every rank trace, sorted by name."""

    kind: InputKind
    path: Path
    trace: Path | None = None
    breakdown: Path | None = None
    run_json: Path | None = None
    sweep_json: Path | None = None
    rank_traces: tuple[Path, ...] = ()


#: A breakdown's (and a multi-rank report's) schema version is a string; the run records' (run.json, sweep.json,
#: handoff.json) an integer.
_BREAKDOWN_VERSION = re.compile(rb'"schema_version"\s*:\s*"')
#: A breakdown names its writer near its start; other JSON with a string ``schema_version`` does not.
_BREAKDOWN_TOOL = re.compile(rb'"tool"\s*:\s*\{\s*"name"\s*:\s*"phaseprof"')


def is_breakdown_json(path: Path) -> bool:
    """A breakdown JSON (phaseprof's own, uncompressed) rather than a trace: checked from the first 4 KiB.
    Special files (a FIFO would block this read) and unreadable files are one-line errors."""
    from phaseprof.trace.limits import require_regular_file

    require_regular_file(path, what="input")
    try:
        with path.open("rb") as f:
            head = f.read(4096)
    except OSError as e:
        raise PhaseprofError(f"cannot read: {e.strerror}", path=path) from None
    return (head[:2] != b"\x1f\x8b" and _BREAKDOWN_VERSION.search(head) is not None
            and _BREAKDOWN_TOOL.search(head) is not None and b'"traceEvents"' not in head)


def _is_trace_name(name: str) -> bool:
    return name.endswith(TRACE_SUFFIXES) and not name.endswith(NOT_TRACES) and not name.startswith(".")


def _head(path: Path) -> bytes | None:
    """The first PEEK_BYTES of ``path``'s content (gunzipped when it is gzip), or None when unreadable."""
    try:
        with path.open("rb") as f:
            raw = f.read(PEEK_BYTES)
        if raw[:2] == b"\x1f\x8b":
            head = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(raw, PEEK_BYTES)
            return head or None  # a gzip cut inside its header: nothing to judge by
        return raw
    except (OSError, zlib.error):
        return None


def looks_like_trace(path: Path) -> bool:
    """``path``'s head holds a trace (see the module docstring); True when the head cannot be read."""
    head = _head(path)
    if head is None:
        return True
    return TRACE_KEY in head or bool(KINETO_START.match(head)) or (bool(EVENT_ARRAY_START.match(head))
                                                                   and b'"ph"' in head)


def file_kind(path: Path) -> InputKind | None:
    """What one file is (the module docstring's rules): ``SWEEP``, ``BREAKDOWN``, ``TRACE``, or None for a file
    that is none of them (a hidden or non-JSON file, a record named in ``RECORD_FILES``, JSON that is no trace).
    A file whose head cannot be read counts as a trace, so the loader names the problem."""
    name = path.name
    if name.startswith(".") or not name.endswith(TRACE_SUFFIXES):
        return None
    if name == SWEEP_NAME:
        return InputKind.SWEEP
    if name.endswith(RECORD_FILES):
        return None
    try:
        if is_breakdown_json(path):
            return InputKind.BREAKDOWN
    except PhaseprofError:
        pass  # unreadable or not a regular file: judged (and named by the loader) as a trace below
    if not _is_trace_name(name):
        return None
    return InputKind.TRACE if looks_like_trace(path) else None


@dataclass(frozen=True)
class DirectoryTraces:
    """The trace files directly inside a directory, and the JSON files there that are not traces (named in
    errors), each sorted by name."""

    traces: tuple[Path, ...]
    skipped: tuple[Path, ...]

    def none_error(self, directory: Path) -> PhaseprofError:
        """The one-line error for a directory holding no trace."""
        names = ", ".join(p.name for p in self.skipped[:8]) + (" ..." if len(self.skipped) > 8 else "")
        why = f" (JSON that is not a trace, skipped: {names})" if self.skipped else ""
        return PhaseprofError(f"no trace files (*.json, *.json.gz holding traceEvents) in this directory{why}",
                              path=directory)


def scan_traces(directory: Path) -> DirectoryTraces:
    """Sort the ``*.json`` / ``*.json.gz`` files directly inside ``directory`` into traces and others:
    phaseprof's own files (NOT_TRACES) by name, the rest by content (``looks_like_trace``)."""
    files = sorted(p for p in directory.iterdir() if p.is_file() and p.name.endswith(TRACE_SUFFIXES)
                   and not p.name.startswith("."))
    traces = tuple(p for p in files if file_kind(p) is InputKind.TRACE)
    return DirectoryTraces(traces, tuple(p for p in files if p not in traces))


def trace_files(directory: Path) -> list[Path]:
    """Trace files directly inside ``directory`` (``scan_traces``), sorted by name."""
    return list(scan_traces(directory).traces)


def find_trace(directory: Path) -> Path | None:
    """A run directory's trace (see TRACE_GLOBS), or None."""
    for g in TRACE_GLOBS:
        hits = sorted(x for x in directory.glob(g) if x.is_file() and file_kind(x) is InputKind.TRACE)
        if hits:
            return hits[0]
    return None


def resolve(path: str | Path) -> Input:
    """What ``path`` is (see the module docstring). Raises PhaseprofError (exit 2) naming the path when it
    does not exist or is a directory holding none of these."""
    p = Path(path)
    if not p.exists():
        raise PhaseprofError("no such file or directory", path=p)
    if not p.is_dir():
        if p.name != SWEEP_NAME:
            is_breakdown_json(p)  # a special or unreadable file: its one-line error here
        kind = file_kind(p)
        if kind is InputKind.SWEEP:
            return Input(InputKind.SWEEP, p, sweep_json=p)
        if kind is InputKind.BREAKDOWN:
            return Input(InputKind.BREAKDOWN, p, breakdown=p)
        return Input(InputKind.TRACE, p, trace=p)
    run = RunDir(p)
    run_json = run.record_file if run.has_record else None
    breakdown = p / BREAKDOWN_NAME if (p / BREAKDOWN_NAME).is_file() else None
    if (p / SWEEP_NAME).is_file():
        return Input(InputKind.SWEEP, p, sweep_json=p / SWEEP_NAME, run_json=run_json)
    scanned = scan_traces(p)
    ranks = list(scanned.traces)
    if len(ranks) < 2 and (p / "ranks").is_dir():
        ranks = trace_files(p / "ranks")
    if len(ranks) >= 2:
        return Input(InputKind.RANKS, p, trace=ranks[0], breakdown=breakdown, run_json=run_json,
                     rank_traces=tuple(ranks))
    trace = find_trace(p)
    if trace is None and breakdown is None and run_json is None:
        skipped = ", ".join(f.name for f in scanned.skipped[:8]) + (" ..." if len(scanned.skipped) > 8 else "")
        raise PhaseprofError("not a run directory (no trace, breakdown.json or run.json"
                             + (f"; JSON that is not a trace, skipped: {skipped})" if skipped else ")"), path=p)
    return Input(InputKind.RUN, p, trace=trace, breakdown=breakdown, run_json=run_json,
                 rank_traces=(trace,) if trace is not None else ())
