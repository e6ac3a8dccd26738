"""What a path given to phaseprof means: a trace, a breakdown JSON, a run directory, a directory of rank traces
or a sweep. Decided here once for ``phaseprof analyze``, ``phaseprof diff``, the rank analysis and the dashboard.

Rules, in order:

- a file: ``sweep.json`` is a sweep; a JSON whose first 4 KiB hold ``"schema_version"`` and no ``"traceEvents"``
  (uncompressed: phaseprof writes breakdowns plain) is a breakdown; anything else is a trace;
- a directory with ``sweep.json`` is a sweep;
- a directory with two or more trace files directly inside (vLLM's profiler writes one per TP/EP rank), or a
  ``ranks/`` sub-directory holding them (``phaseprof capture --tensor-parallel-size``), is a rank directory;
- a directory with a trace, ``breakdown.json`` or ``run.json`` is a run directory (``phaseprof capture``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from phaseprof.errors import PhaseprofError

#: A run directory's trace, in order of preference (capture writes ``trace.json.gz``).
TRACE_GLOBS = ("trace.json.gz", "trace.json", "*.pt.trace.json.gz", "*.trace.json.gz", "*.json.gz")
TRACE_SUFFIXES = (".json", ".json.gz")
#: JSON files that are never traces.
NOT_TRACES = ("breakdown.json", "run.json", "sweep.json", "plot.json", ".schema.json", "MANIFEST.json", "package.json")
SWEEP_NAME = "sweep.json"


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
    return head[:2] != b"\x1f\x8b" and b'"schema_version"' in head and b'"traceEvents"' not in head


def _is_trace_name(name: str) -> bool:
    return name.endswith(TRACE_SUFFIXES) and not name.endswith(NOT_TRACES) and not name.startswith(".")


def trace_files(directory: Path) -> list[Path]:
    """Trace files directly inside ``directory`` (``*.json``, ``*.json.gz`` but not phaseprof's own JSON
    files), sorted by name."""
    return sorted(p for p in directory.iterdir() if p.is_file() and _is_trace_name(p.name))


def find_trace(directory: Path) -> Path | None:
    """A run directory's trace (see TRACE_GLOBS), or None."""
    for g in TRACE_GLOBS:
        hits = sorted(x for x in directory.glob(g) if x.is_file() and _is_trace_name(x.name))
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
        if p.name == SWEEP_NAME:
            return Input(InputKind.SWEEP, p, sweep_json=p)
        if is_breakdown_json(p):
            return Input(InputKind.BREAKDOWN, p, breakdown=p)
        return Input(InputKind.TRACE, p, trace=p)
    run_json = p / "run.json" if (p / "run.json").is_file() else None
    breakdown = p / "breakdown.json" if (p / "breakdown.json").is_file() else None
    if (p / SWEEP_NAME).is_file():
        return Input(InputKind.SWEEP, p, sweep_json=p / SWEEP_NAME, run_json=run_json)
    ranks = trace_files(p)
    if len(ranks) < 2 and (p / "ranks").is_dir():
        ranks = trace_files(p / "ranks")
    if len(ranks) >= 2:
        return Input(InputKind.RANKS, p, trace=ranks[0], breakdown=breakdown, run_json=run_json,
                     rank_traces=tuple(ranks))
    trace = find_trace(p)
    if trace is None and breakdown is None and run_json is None:
        raise PhaseprofError("not a run directory (no trace, breakdown.json or run.json)", path=p)
    return Input(InputKind.RUN, p, trace=trace, breakdown=breakdown, run_json=run_json,
                 rank_traces=(trace,) if trace is not None else ())
