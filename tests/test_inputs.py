"""One resolver says what a path is (phaseprof.inputs), on the committed run, rank, sweep and trace files."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from phaseprof.scale.ranks import find_trace_files
from phaseprof.commands.main import main
from phaseprof.errors import PhaseprofError
from phaseprof.inputs import InputKind, looks_like_trace, resolve, scan_traces, trace_files

REPO = Path(__file__).resolve().parents[1]
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


# ---- which JSON files in a directory are traces: by content, on the committed directory layouts
OWN_GRAPH = REPO / "traces/h200/own-graph"  # vLLM's own profiler output + the session's result.json
SERVER_TP1 = REPO / "traces/h200/server-tp1"  # serve.json, client.json, a run.json copy; traces in sub-folders
PUBLIC_CUT = REPO / "traces/public-cut/h100_vllm_llama70b_tp4_decode_2steps.json.gz"


def test_json_beside_rank_traces_is_not_a_rank() -> None:
    scanned = scan_traces(TP2)
    assert [p.name for p in scanned.traces] == ["rank0.pt.trace.json.gz", "rank1.pt.trace.json.gz"]
    assert [p.name for p in scanned.skipped] == ["tp_run.json"]
    got = resolve(OWN_GRAPH)  # one trace and result.json: a run with that trace, not a set of two "ranks"
    assert got.kind == InputKind.RUN and got.trace == OWN_GRAPH / "vllm-own-graph-prefill4096-decode1.pt.trace.json.gz"
    assert [p.name for p in scan_traces(OWN_GRAPH).skipped] == ["result.json"]


def test_directory_of_only_other_json_names_what_it_skipped(capsys: pytest.CaptureFixture[str]) -> None:
    skipped = ["client.json", "inproc-prefill-4096-graph-run.json", "serve.json"]
    assert [p.name for p in scan_traces(SERVER_TP1).skipped] == skipped and not trace_files(SERVER_TP1)
    with pytest.raises(PhaseprofError, match="skipped: " + ", ".join(skipped)):
        resolve(SERVER_TP1)
    with pytest.raises(PhaseprofError, match="no trace files .* skipped: " + ", ".join(skipped)):
        find_trace_files(SERVER_TP1)
    assert main(["analyze", str(SERVER_TP1)]) == 2
    err = capsys.readouterr().err
    assert "serve.json" in err and len(err.strip().splitlines()) == 1


def test_a_trace_is_known_by_content_whatever_its_name(tmp_path: Path) -> None:
    (tmp_path / "train.json.gz").write_bytes(PUBLIC_CUT.read_bytes())  # public traces are named anything
    (tmp_path / "plain.json").write_bytes(gzip.decompress(PUBLIC_CUT.read_bytes()))
    (tmp_path / "config.json").write_bytes((TP2 / "tp_run.json").read_bytes())
    (tmp_path / "broken.json.gz").write_bytes(PUBLIC_CUT.read_bytes()[:10])  # unreadable head: kept, the
    scanned = scan_traces(tmp_path)  # loader then names the problem
    assert [p.name for p in scanned.traces] == ["broken.json.gz", "plain.json", "train.json.gz"]
    assert [p.name for p in scanned.skipped] == ["config.json"]
    assert looks_like_trace(tmp_path / "plain.json") and not looks_like_trace(H200_RUN / "breakdown.json")
