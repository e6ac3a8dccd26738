"""One resolver says what a path is (phaseprof.inputs), on the committed run, rank, sweep and trace files."""

from __future__ import annotations

from pathlib import Path

import pytest

from phaseprof.cli import main
from phaseprof.errors import PhaseprofError
from phaseprof.inputs import InputKind, resolve

REPO = Path(__file__).resolve().parents[2]
CPU_RUN = REPO / "traces/cpu/tiny-hybrid-prefill128-decode8"
TP2 = REPO / "traces/h200x2/tp2-eager-prefill4096-decode8"
H200_RUN = next((REPO / "traces/h200/graph").glob("*-prefill-4096"))
H200_SWEEP = next((REPO / "traces/h200/graph").glob("*-sweep-prefill-*"))


def test_run_directory() -> None:
    got = resolve(CPU_RUN)
    assert (got.kind, got.trace, got.run_json) == (InputKind.RUN, CPU_RUN / "trace.json.gz", CPU_RUN / "run.json")
    full = resolve(H200_RUN)
    assert full.kind == InputKind.RUN and full.breakdown == H200_RUN / "breakdown.json"


def test_files_by_content() -> None:
    assert resolve(H200_RUN / "breakdown.json").kind == InputKind.BREAKDOWN
    assert resolve(H200_RUN / "trace.json.gz").kind == InputKind.TRACE
    assert resolve(H200_RUN / "run.json").kind == InputKind.TRACE  # not a breakdown: the loader will say why
    assert resolve(H200_SWEEP / "sweep.json").kind == resolve(H200_SWEEP).kind == InputKind.SWEEP


def test_rank_directories_both_layouts(tmp_path: Path) -> None:
    got = resolve(TP2)  # vLLM's profiler output: rank traces side by side
    assert got.kind == InputKind.RANKS and [p.name for p in got.rank_traces] == \
        ["rank0.pt.trace.json.gz", "rank1.pt.trace.json.gz"] and got.trace == got.rank_traces[0]
    run = tmp_path / "run"  # phaseprof capture --tensor-parallel-size: run.json + ranks/
    (run / "ranks").mkdir(parents=True)
    (run / "run.json").write_text("{}")
    for f in got.rank_traces:
        (run / "ranks" / f.name).symlink_to(f)
    cap = resolve(run)
    assert cap.kind == InputKind.RANKS and len(cap.rank_traces) == 2 and cap.run_json == run / "run.json"


def test_what_is_not_an_input(tmp_path: Path) -> None:
    with pytest.raises(PhaseprofError, match="no such file"):
        resolve(tmp_path / "nope")
    with pytest.raises(PhaseprofError, match="not a run directory"):
        resolve(tmp_path)


def test_analyze_refuses_a_breakdown_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(H200_RUN / "breakdown.json")]) == 2
    err = capsys.readouterr().err
    assert "a breakdown JSON, not a trace" in err and len(err.strip().splitlines()) == 1
