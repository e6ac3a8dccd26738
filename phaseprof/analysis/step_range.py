"""``--steps FIRST:LAST``: analyse a window of a long trace without loading the rest of it.

Steps are numbered as the breakdown's step table numbers them (from 0, in time order, steps with no tokens left
out), and the range is a Python slice: ``4:8`` is steps 4, 5, 6 and 7; ``:8`` the first eight, ``30:`` from step
30 on. The window is found from the trace's step markers (phaseprof's, vLLM's ``execute_context`` or
``ProfilerStep#N``) in a first pass that keeps nothing else; the second pass keeps only the events those steps
need (:mod:`phaseprof.trace.select`). Traces whose steps are inferred (no markers) cannot be windowed this way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from phaseprof.analysis.phase_infer import _is_empty
from phaseprof.analysis.steps import StepWindow, marker_steps
from phaseprof.errors import PhaseprofError
from phaseprof.trace.select import EventWindow, Scan
from phaseprof.trace.read import load_tables
from phaseprof.trace.readers import Reader
from phaseprof.trace.tables import EventTables, scan_trace

_SPEC = re.compile(r"^([0-9]{0,9}):([0-9]{0,9})$")


@dataclass(frozen=True)
class StepRange:
    """A slice of the step table: ``first`` included, ``last`` excluded (None: to the end)."""

    first: int
    last: int | None

    @classmethod
    def parse(cls, spec: str) -> StepRange:
        m = _SPEC.match(spec.strip())
        if m is None:
            raise PhaseprofError(f"--steps {spec!r}: expected FIRST:LAST, a Python slice of step numbers "
                                 f"(4:8 is steps 4 to 7; :8 and 30: leave an end open)")
        first, last = int(m[1] or 0), int(m[2]) if m[2] else None
        if last is not None and last <= first:
            raise PhaseprofError(f"--steps {spec}: an empty range (LAST is excluded: {first}:{first + 1} is step "
                                 f"{first} alone)")
        return cls(first, last)

    def __str__(self) -> str:
        return f"{self.first}:{'' if self.last is None else self.last}"


@dataclass(frozen=True)
class Windowed:
    """The tables of a window and where it sits in the whole trace."""

    tables: EventTables
    range: StepRange
    first: int  # the first step's number in the whole trace's step table
    count: int  # steps in the window
    total: int  # steps in the whole trace
    host_ns: tuple[int, int]  # the window's steps start in [lo, hi) (host clock, ns from the trace origin)

    def detail(self) -> str:
        return (f"steps {self.first} to {self.first + self.count - 1} of {self.total} (--steps {self.range}): only "
                f"the events they need were loaded")


def load_window(path: str | Path, steps: StepRange, *, reader: Reader = Reader.AUTO) -> Windowed:
    """Two passes over ``path``: find the step windows, then load the events the chosen steps need (with the
    pure-Python reader: ``Reader.NATIVE`` is refused before the first pass)."""
    if reader == Reader.NATIVE:
        raise PhaseprofError("--reader native reads whole traces: --steps reads only its steps' events, with the "
                             "pure-Python reader (--reader python or auto)")
    scan = scan_trace(path, Scan)
    assert isinstance(scan, Scan)
    ops = scan.marker_ops()
    det = marker_steps(ops) if len(ops) else None
    if det is None:
        raise PhaseprofError("--steps needs step markers (phaseprof's, vLLM's execute_context or ProfilerStep#N); "
                             "this trace has none: analyse it whole", path=path)
    numbered = [s for s in det.steps if not _is_empty(s)]
    last = len(numbered) if steps.last is None else steps.last
    if steps.first >= len(numbered) or last > len(numbered):
        raise PhaseprofError(f"--steps {steps}: the trace has {len(numbered)} steps (0 to {len(numbered) - 1})",
                             path=path)
    chosen = numbered[steps.first:last]
    lo, hi = chosen[0].host_start_ns, max(s.host_end_ns for s in chosen)
    window = EventWindow.around(scan, lo, hi)
    del scan, ops
    tables = load_tables(path, keep=window, origin_us=window.origin_us, reader=reader)
    return Windowed(tables=tables, range=steps, first=steps.first, count=len(chosen), total=len(numbered),
                    host_ns=(lo, hi))


__all__ = ["StepRange", "StepWindow", "Windowed", "load_window"]
