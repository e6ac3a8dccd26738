"""``phaseprof analyze --steps FIRST:LAST``: a window of a real trace gives the step rows the whole-trace analysis
gives for the same steps, loads fewer events, records the window in the breakdown, and refuses bad specs in one
line."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from phaseprof.analysis.pipeline import analyze
from phaseprof.analysis.step_range import StepRange
from phaseprof.errors import PhaseprofError
from phaseprof.report.json_io import dumps

from ..conftest import REPO
from ..hostile.helpers import one_line_error

H200 = REPO / "traces" / "h200"
GRAPH_DECODE = next((H200 / "graph").glob("*decode*/trace.json.gz"))  # 5 steps (cut), phaseprof markers
EAGER_DECODE = next((H200 / "eager").glob("*decode*/trace.json.gz"))  # 3 steps (prefill, decode 1-2)
TP2_RANK = REPO / "traces" / "h200x2" / "tp2-eager-prefill4096-decode8" / "rank0.pt.trace.json.gz"  # vLLM markers
NO_MARKERS = H200 / "plain" / "graph_decode_plain_profiler_6steps.json.gz"


def _same(a: Any, b: Any) -> bool:
    """Equal, floats to 1e-12 relative (bucket sums add the same items in another order)."""
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-9)
    return a == b


def _rows(path: Path, spec: str | None) -> tuple[dict, Any]:
    analysed = analyze(path, steps=StepRange.parse(spec) if spec else None)
    return json.loads(dumps(analysed.breakdown)), analysed.tables


@pytest.mark.parametrize(("trace", "spec", "expected"), [
    (GRAPH_DECODE, "2:3", [2]), (GRAPH_DECODE, "1:4", [1, 2, 3]), (GRAPH_DECODE, "4:", [4]),
    (EAGER_DECODE, ":2", [0, 1]), (EAGER_DECODE, "2:", [2]), (TP2_RANK, "0:1", [0]), (TP2_RANK, "1:", [1]),
], ids=lambda v: v.parent.name[:30] if isinstance(v, Path) else str(v))
def test_window_rows_equal_the_whole_traces(trace: Path, spec: str, expected: list[int]) -> None:
    whole, whole_tables = _rows(trace, None)
    window, window_tables = _rows(trace, spec)
    assert [r["index"] for r in window["steps"]] == expected
    for row in window["steps"]:
        ref = whole["steps"][row["index"]]
        assert row["label"] == ref["label"]
        bad = [k for k in ref if not _same(ref[k], row[k])]
        assert not bad, {k: (ref[k], row[k]) for k in bad}
    recorded = str(StepRange.parse(spec))  # "FIRST:LAST" with FIRST filled in
    assert window["step_detection"]["window"] == recorded
    assert f"(--steps {recorded})" in window["step_detection"]["detail"]
    if len(expected) < len(whole["steps"]) - 1:  # the rest of the trace was not loaded
        assert len(window_tables.ops) < len(whole_tables.ops)
        assert len(window_tables.gpu) < len(whole_tables.gpu)


@pytest.mark.parametrize(("spec", "words"), [
    ("4-8", ["expected FIRST:LAST"]), ("a:b", ["expected FIRST:LAST"]), ("5:5", ["empty range"]),
    ("-1:", ["expected FIRST:LAST"]),
])
def test_bad_spec_is_one_line(spec: str, words: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    one_line_error(["analyze", str(EAGER_DECODE), "--steps", spec], capsys, "--steps", *words)


def test_window_past_the_last_step(capsys: pytest.CaptureFixture[str]) -> None:
    one_line_error(["analyze", str(EAGER_DECODE), "--steps", "3:"], capsys, "3 steps (0 to 2)", EAGER_DECODE.name)
    one_line_error(["analyze", str(EAGER_DECODE), "--steps", "2:9"], capsys, "3 steps (0 to 2)")


def test_no_markers_and_rank_directories_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    one_line_error(["analyze", str(NO_MARKERS), "--steps", "0:2"], capsys, "needs step markers", NO_MARKERS.name)
    one_line_error(["analyze", str(TP2_RANK.parent), "--steps", "0:2"], capsys, "one trace file")


def test_cli_json_records_the_window(tmp_path: Path) -> None:
    from phaseprof.commands.main import main

    out = tmp_path / "w.json"
    assert main(["analyze", str(GRAPH_DECODE), "--steps", "3:5", "--json", str(out), "--format", "json"]) == 0
    bd = json.loads(out.read_text())
    assert [r["index"] for r in bd["steps"]] == [3, 4] and bd["step_detection"]["window"] == "3:5"


def test_range_parse() -> None:
    assert (StepRange.parse("4:8").first, StepRange.parse("4:8").last) == (4, 8)
    assert StepRange.parse(":8").first == 0 and StepRange.parse("30:").last is None
    with pytest.raises(PhaseprofError):
        StepRange.parse("8")
