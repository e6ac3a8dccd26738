"""Golden tests: the key facts of each committed cut-down trace (traces/public-cut/) against expected JSON.

The expected files (tests/golden/expected/<trace>.json) change only with ``pytest --update-golden``; the diff
of a refresh is reviewed like code: it says exactly which numbers moved.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pytest

from phaseprof.analysis.pipeline import analyze_trace
from phaseprof.analysis.results import Breakdown
from phaseprof.io import atomic_write_text

from .facts import (EXPECTED_DIR, compare_facts, dump_facts, expected_path, fixture_files, key_facts,
                    load_expected)

FIXTURES = fixture_files()


@lru_cache(maxsize=None)
def breakdown_of(path: Path) -> Breakdown:
    return analyze_trace(path)


def test_fixtures_are_committed() -> None:
    assert len(FIXTURES) >= 7, f"expected the cut-down public traces in traces/public-cut, found {FIXTURES}"


@pytest.mark.parametrize("trace", FIXTURES, ids=lambda p: p.name.split(".json")[0])
def test_golden(trace: Path, update_golden: bool) -> None:
    facts = key_facts(breakdown_of(trace))
    if update_golden:
        atomic_write_text(expected_path(trace), dump_facts(facts) + "\n")
        return
    expected = load_expected(trace)
    assert expected is not None, f"no {expected_path(trace).name}: run `pytest tests/golden --update-golden`"
    diffs = compare_facts(expected, facts)
    assert not diffs, (f"{trace.name} differs from its golden file (if intended: pytest --update-golden, then "
                       "review the diff):\n  " + "\n  ".join(diffs[:40]))


def test_no_stale_golden_files() -> None:
    names = {expected_path(t).name for t in FIXTURES}
    stale = sorted(p.name for p in EXPECTED_DIR.glob("*.json") if p.name not in names)
    assert not stale, f"golden files without a fixture: {stale}"
