"""Duplicate and overlapping step markers: six copies of each marker gave a phase six times
the trace's wall time; a marker overlapping the previous one counted the shared time twice, with no note. One
engine step runs at a time on the host, so copies are merged, nested markers dropped and overlaps trimmed, and
the breakdown's notes say so. The traces are the real CPU capture with its own markers copied or shifted."""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from phaseprof.analysis.invariants import broken_invariants
from phaseprof.analysis.pipeline import analyze

from ..conftest import REPO

TRACE = REPO / "traces/cpu/tiny-hybrid-prefill128-decode8/trace.json.gz"
_PREFIX = "phaseprof_step#"


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    with gzip.open(TRACE, "rb") as f:
        return json.load(f)


def _markers(d: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in d["traceEvents"] if str(e.get("name", "")).startswith(_PREFIX)]


def _write(tmp_path: Path, d: dict[str, Any], extra: list[dict[str, Any]]) -> Path:
    out = dict(d, traceEvents=d["traceEvents"] + extra)
    p = tmp_path / "t.json"
    p.write_bytes(orjson.dumps(out))
    return p


def _walls(bd) -> dict[str, float]:  # noqa: ANN001
    return {ph.phase: ph.wall_us for ph in bd.phases}


def test_six_copies_of_every_marker_count_once(doc: dict[str, Any], tmp_path: Path) -> None:
    base = analyze(TRACE).breakdown
    copies = [copy.deepcopy(m) for m in _markers(doc) for _ in range(5)]
    bd = analyze(_write(tmp_path, doc, copies)).breakdown
    assert len(bd.steps) == len(base.steps)
    assert _walls(bd) == pytest.approx(_walls(base))
    assert [s.wall_us for s in bd.steps] == pytest.approx([s.wall_us for s in base.steps])
    assert any(f"{len(copies)} duplicate step marker(s)" in n for n in bd.notes), bd.notes
    assert not broken_invariants(bd)


def test_overlapping_markers_do_not_double_count(doc: dict[str, Any], tmp_path: Path) -> None:
    """A copy of each marker shifted by half its length overlaps it: it starts where the original ends, so the
    steps' host windows stay disjoint and their sum is at most the markers' union."""
    marks = _markers(doc)
    shifted = []
    for m in marks:
        c = copy.deepcopy(m)
        c["ts"] = m["ts"] + m["dur"] / 2
        shifted.append(c)
    at = analyze(_write(tmp_path, doc, shifted))
    windows = sorted((s.host_start_ns, s.host_end_ns) for s in at.prepared.detection.steps)
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(windows, windows[1:]))
    union_us = sum(m["dur"] for m in marks) + sum(min(m["dur"] / 2, nxt["ts"] - m["ts"] - m["dur"])
                                                  for m, nxt in zip(marks, marks[1:] + [{"ts": float("inf")}]))
    assert sum(e - s for s, e in windows) / 1e3 <= union_us + 1
    assert any("overlapping the previous one" in n for n in at.breakdown.notes), at.breakdown.notes


def test_nested_marker_is_dropped(doc: dict[str, Any], tmp_path: Path) -> None:
    m = _markers(doc)[0]
    inner = copy.deepcopy(m)
    inner["ts"], inner["dur"] = m["ts"] + m["dur"] / 4, m["dur"] / 2
    base = analyze(TRACE).breakdown
    bd = analyze(_write(tmp_path, doc, [inner])).breakdown
    assert len(bd.steps) == len(base.steps) and _walls(bd) == pytest.approx(_walls(base))
    assert any("inside another step marker dropped" in n for n in bd.notes), bd.notes


def test_real_traces_have_no_marker_notes() -> None:
    """The committed captures have disjoint markers: nothing merged, nothing said."""
    bd = analyze(TRACE).breakdown
    assert not [n for n in bd.notes if "step marker" in n]


def test_per_step_work_builds_no_frame_per_step(doc: dict[str, Any], tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """200k markers ran for minutes (~0.65 ms per step); now the per-step rows read slices of
    arrays, so the pandas row selections of the analysis do not grow with the step count. The same real trace
    with each marker split into four quarters (4x the steps) makes as many ``DataFrame.take`` calls. (The time
    ratio is benchmarks/bench_steps.py's.)"""
    import pandas as pd

    marks = _markers(doc)
    quarters = [dict(m, ts=m["ts"] + q * m["dur"] / 4, dur=m["dur"] / 4) for m in marks for q in range(4)]
    ids = {id(m) for m in marks}
    split = dict(doc, traceEvents=[e for e in doc["traceEvents"] if id(e) not in ids])
    calls = {"n": 0}
    take = pd.DataFrame.take

    def counting(self, *a, **k):  # noqa: ANN001, ANN002, ANN003, ANN202
        calls["n"] += 1
        return take(self, *a, **k)

    monkeypatch.setattr(pd.DataFrame, "take", counting)
    analyze(TRACE)
    base, calls["n"] = calls["n"], 0
    bd = analyze(_write(tmp_path, split, quarters)).breakdown
    assert len(bd.steps) == 4 * len(marks)
    assert calls["n"] <= base + 2, (base, calls["n"])
