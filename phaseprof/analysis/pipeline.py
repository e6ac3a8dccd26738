"""The one entry point the CLI, capture and dashboard share: trace file -> Breakdown."""

from __future__ import annotations

from pathlib import Path

from phaseprof.analysis.breakdown import analyze_tables
from phaseprof.analysis.invariants import checked
from phaseprof.analysis.results import Breakdown
from phaseprof.classify.rules import load_rules
from phaseprof.trace.tables import load_tables


def analyze_trace(path: str | Path, *, rules: list[Path] | None = None) -> Breakdown:
    """Load a Kineto trace and compute its breakdown. ``rules``: extra TOML rule files, matched first."""
    return checked(analyze_tables(load_tables(path), load_rules(rules)))
