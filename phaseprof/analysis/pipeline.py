"""The analysis pipeline in one place: trace file -> event tables -> steps and work items -> Breakdown.

::

    load_tables (trace/)  ->  prepare (analysis/prepare.py: correlate, classify, find steps, work items)
                          ->  summarize (analysis/breakdown.py: per-step rows, per-phase summaries)

``analyze`` runs it once and returns an :class:`AnalysedTrace`; every consumer (CLI, diff, dashboard, HTA
cross-check, rank analysis) takes that object instead of re-running parts of the pipeline. Views that only
some consumers need (the timeline index, kernel order) are computed on first use and kept; the speed of light
is attached above the analysis (``sol.attach.analysed_sol``).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from phaseprof.analysis.breakdown import summarize
from phaseprof.analysis.heap import kept_heap
from phaseprof.analysis.invariants import checked
from phaseprof.analysis.layer_plan import find_plan
from phaseprof.analysis.order import KernelOrder, kernel_order_of
from phaseprof.analysis.prepare import Prepared, prepare
from phaseprof.analysis.profiler_cost import profiler_cost
from phaseprof.analysis.profiler_types import ProfilerCost
from phaseprof.analysis.results import Breakdown
from phaseprof.analysis.step_range import StepRange, Windowed, load_window
from phaseprof.analysis.graph_align import Reference
from phaseprof.classify.rules import RuleSet, load_rules
from phaseprof.errors import PhaseprofError
from phaseprof.records import RunRecord
from phaseprof.trace.read import load_tables
from phaseprof.trace.readers import Reader
from phaseprof.trace.recording import read_recording
from phaseprof.trace.tables import EventTables

if TYPE_CHECKING:
    from phaseprof.analysis.timeline import TimelineIndex

__all__ = ["AnalysedTrace", "AnalysisConfig", "KernelOrder", "analyze", "analyze_trace",
           "load_reference"]


@dataclass(frozen=True)
class AnalysisConfig:
    """Everything that changes an analysis besides the trace. ``rules``: extra classification rule files
    (TOML), matched before the defaults. ``graph_reference``: a trace of the graph capture (or an eager run) of
    the same model, whose kernel sequences give graph-replayed kernels their modules.
    ``model_config`` also gives the layer plan that places graph-replayed kernels without a reference
    (``analysis.structural``; default: what run.json or the trace records).

    Speed of light (``sol.attach.analysed_sol``): ``model_config`` is ``--model-config`` (config.json, its
    directory or a preset name; None = what run.json or the trace records); ``ceilings`` is ``--ceilings``
    (a measured file, "spec", or None = the GPU's one baseline: ``sol.ceilings.choose_ceiling``);
    ``capture``: the capture's record where the caller has it before run.json is written (a capture analyses
    its trace first), e.g. ``RunRecord(model_config=...)``; it wins over run.json and the trace's own facts."""

    rules: tuple[Path, ...] = ()
    graph_reference: Path | None = None
    model_config: str | None = None
    ceilings: str | None = None
    capture: RunRecord | None = field(default=None, compare=False)
    #: Which reader makes the tables (``--reader``): both give the same tables, so not part of the identity.
    reader: Reader = field(default=Reader.AUTO, compare=False)

    @classmethod
    def with_rules(cls, rules: Iterable[str | Path] | None, *, graph_reference: str | Path | None = None,
                   model_config: str | Path | None = None, ceilings: str | Path | None = None,
                   reader: Reader = Reader.AUTO) -> AnalysisConfig:
        return cls(rules=tuple(Path(r) for r in rules or ()),
                   graph_reference=Path(graph_reference) if graph_reference is not None else None,
                   model_config=str(model_config) if model_config is not None else None,
                   ceilings=str(ceilings) if ceilings is not None else None, reader=Reader(reader))

    def ruleset(self) -> RuleSet:
        return load_rules(list(self.rules) or None)


@dataclass(frozen=True, eq=False)
class AnalysedTrace:
    """One trace, analysed once: its tables, the prepared work items and the breakdown.

    ``timeline`` and ``kernel_order`` are derived on first access and then kept (the object is immutable).
    ``breakdown`` has no ``sol`` section: the speed of light is attached a layer up, by
    ``sol.attach.analysed_sol`` / ``reported`` (kept per object the same way).
    """

    tables: EventTables
    rules: RuleSet = field(repr=False)
    prepared: Prepared = field(repr=False)
    breakdown: Breakdown = field(repr=False)
    config: AnalysisConfig = field(default_factory=AnalysisConfig, repr=False)

    @property
    def path(self) -> str:
        """The trace file as given to ``analyze``."""
        return self.tables.meta.path

    @cached_property
    def timeline(self) -> TimelineIndex:
        """Per-trace index that ``analysis.timeline.step_timeline`` cuts single steps out of."""
        from phaseprof.analysis.timeline import index_prepared

        return index_prepared(self.tables, self.prepared)

    @cached_property
    def kernel_order(self) -> KernelOrder:
        """Per phase, each work item name's median position in its step (see ``analysis.order``)."""
        return kernel_order_of(self.prepared)


def analyze(source: str | Path | EventTables, *, config: AnalysisConfig | None = None,
            ruleset: RuleSet | None = None, steps: StepRange | None = None) -> AnalysedTrace:
    """Run the whole pipeline on a trace file (or tables already loaded). ``ruleset`` (already loaded rules)
    takes precedence over ``config.rules``; pass it when analysing many traces with the same rules. ``steps``:
    only those steps of a trace file, loading only the events they need (``analysis.step_range``)."""
    config = config or AnalysisConfig()
    window = None
    if steps is not None and not isinstance(source, EventTables):
        window = load_window(source, steps, reader=config.reader)
        tables = window.tables
    else:
        tables = source if isinstance(source, EventTables) else load_tables(source, reader=config.reader)
    rules = ruleset if ruleset is not None else config.ruleset()
    ref = load_reference(config.graph_reference, rules) if config.graph_reference is not None else None
    try:
        plan, where = find_plan(explicit=config.model_config, records=(config.capture, tables.meta.capture),
                                trace_path=tables.meta.path or None)
    except PhaseprofError as e:  # a bad --model-config is reported by the speed of light, which needs it too
        plan, where = None, str(e)
    with kept_heap():
        prep = prepare(tables, rules, reference=ref, only_steps_in=window.host_ns if window is not None else None,
                       plan=plan, plan_note=f"no layer plan for graph replays: {where}")
        bd = summarize(tables, prep)
    # what the profiler recorded needs the file (a pass of its own): the tables keep only the module frames
    path = tables.meta.path if isinstance(source, EventTables) else source
    if path and str(path) != "-" and Path(path).is_file():
        bd = replace(bd, profiler=_profiler(path, bd, tables))
    if window is not None:
        bd = _numbered_as_whole(bd, window)
    return AnalysedTrace(tables=tables, rules=rules, prepared=prep, breakdown=checked(bd), config=config)


def _profiler(path: str | Path, bd: Breakdown, tables: EventTables) -> ProfilerCost | None:
    """What the trace was recorded with, and the stack recorder's host cost per phase (analysis.profiler_cost);
    None where the file cannot be read again (it changed since, or holds bytes after its trace that the table
    loader ignores): the breakdown stands without the section."""
    try:
        rec = read_recording(path)
    except (OSError, EOFError, zlib.error, PhaseprofError):
        return None
    return profiler_cost(rec, phases=bd.phases, steps=bd.steps, origin_us=tables.meta.origin_us)


def _numbered_as_whole(bd: Breakdown, window: Windowed) -> Breakdown:
    """The window's step rows numbered as in the whole trace, and the window recorded in ``step_detection``."""
    steps = [replace(r, index=r.index + window.first) for r in bd.steps]
    detection = {**bd.step_detection, "window": str(window.range),
                 "detail": f"{bd.step_detection['detail']}; {window.detail()}"}
    return replace(bd, steps=steps, step_detection=detection)


def analyze_trace(path: str | Path, *, rules: list[Path] | None = None,
                  graph_reference: str | Path | None = None) -> Breakdown:
    """Load a Kineto trace and compute its breakdown. ``rules``: extra TOML rule files, matched first.
    ``graph_reference``: see :class:`AnalysisConfig`."""
    return analyze(path, config=AnalysisConfig.with_rules(rules, graph_reference=graph_reference)).breakdown


def reference_trace(path: str | Path) -> Path:
    """The trace a ``--graph-reference`` names: a trace file, or a run directory holding one."""
    from phaseprof.inputs import InputKind, resolve

    inp = resolve(path)
    if inp.kind in (InputKind.RUN, InputKind.TRACE) and inp.trace is not None:
        return inp.trace
    raise PhaseprofError(f"graph reference must be a trace or a run directory with one ({inp.kind} input): "
                         "alignment needs its kernel sequence", path=Path(path))


def load_reference(path: str | Path, rules: RuleSet) -> Reference:
    """Capture-window and eager kernel sequences of a reference trace (or a run directory's), with their
    modules."""
    from phaseprof.analysis.attribution import graph_reference
    from phaseprof.analysis.items import op_modules
    from phaseprof.analysis.modules import build_module_tree
    from phaseprof.trace.correlate import correlate

    path = reference_trace(path)
    t = load_tables(path)
    c = correlate(t)
    tree = build_module_tree(t.modules, rules)
    segs = graph_reference(t, c, rules, op_modules(t.ops, c.op_parent, rules), tree)
    return segs, Path(path).name, tree.layer_types
