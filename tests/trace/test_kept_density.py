"""The kept-event bounds of the loader: real traces pass (their bytes per kept event are above the density
floor), a trace denser than that is refused in one line naming the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from phaseprof.trace import limits, tables
from phaseprof.trace.read import load_tables

from ..conftest import REPO
from ..hostile.helpers import one_line_error

REAL = sorted((REPO / "traces" / "h200").rglob("*.json.gz"))


@pytest.mark.parametrize("trace", REAL, ids=lambda p: str(p.relative_to(REPO / "traces")).split(".json")[0])
def test_real_traces_are_not_denser_than_the_floor(trace: Path) -> None:
    t = load_tables(trace)
    kept = sum(len(f) for f in (t.gpu, t.runtime, t.ops, t.gpu_annotations, t.memory)) + len(t.modules)
    assert t.meta.decompressed_bytes >= limits.MIN_BYTES_PER_KEPT_EVENT * kept, kept


def test_denser_than_the_floor_is_refused(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
                                          ) -> None:
    trace = next((REPO / "traces" / "h200" / "eager").glob("*decode*/trace.json.gz"))
    monkeypatch.setattr(tables, "DENSE_KEPT_EVENTS", 1000)
    monkeypatch.setattr(tables, "MIN_BYTES_PER_KEPT_EVENT", 10_000)
    one_line_error(["analyze", str(trace)], capsys, "denser than real traces", trace.name)
