"""The one entry point the CLI, capture and dashboard share: trace file -> Breakdown."""

from __future__ import annotations

from pathlib import Path

from phaseprof.analysis.breakdown import analyze_tables
from phaseprof.analysis.results import Breakdown
from phaseprof.analysis.graph_align import Reference
from phaseprof.classify.rules import RuleSet, load_rules
from phaseprof.trace.tables import load_tables


def analyze_trace(path: str | Path, *, rules: list[Path] | None = None,
                  graph_reference: str | Path | None = None) -> Breakdown:
    """Load a Kineto trace and compute its breakdown. ``rules``: extra TOML rule files, matched first.
    ``graph_reference``: a trace of the graph capture (or an eager run) of the same model, whose kernel sequences
    give graph-replayed kernels their modules."""
    rs = load_rules(rules)
    ref = load_reference(graph_reference, rs) if graph_reference is not None else None
    return analyze_tables(load_tables(path), rs, reference=ref)


def load_reference(path: str | Path, rules: RuleSet) -> Reference:
    """Capture-window and eager kernel sequences of a reference trace, with their modules."""
    from phaseprof.analysis.attribution import graph_reference
    from phaseprof.analysis.items import op_modules
    from phaseprof.analysis.modules import build_module_tree
    from phaseprof.trace.correlate import correlate

    t = load_tables(path)
    c = correlate(t)
    tree = build_module_tree(t.modules, rules)
    segs = graph_reference(t, c, rules, op_modules(t.ops, c.op_parent, rules), tree)
    return segs, Path(path).name, tree.layer_types
