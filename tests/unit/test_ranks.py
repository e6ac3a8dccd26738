"""Multi-rank runs: the real TP2 capture on two H200s, and the ways rank files go wrong."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from phaseprof.analysis.ranks import analyze_ranks, find_trace_files
from phaseprof.cli import main
from phaseprof.errors import PhaseprofError

ROOT = Path(__file__).resolve().parents[2]
TP2 = ROOT / "traces/h200x2/tp2-eager-prefill4096-decode8"
H100_TP4_CUT = ROOT / "traces/public-cut/h100_vllm_llama70b_tp4_decode_2steps.json.gz"


@pytest.fixture(scope="module")
def tp2():
    return analyze_ranks(find_trace_files(TP2))


def test_tp2_capture_is_one_run_of_two_ranks(tp2):
    assert tp2.world_size == 2 and sorted(tp2.ranks) == [0, 1]
    assert tp2.warnings == []
    for bd in tp2.ranks.values():
        assert bd.step_detection["method"] == "markers:vllm"  # vLLM's own profiler writes execute_context_*
        assert [s.phase for s in bd.steps] == ["prefill", "decode", "decode"]
        assert bd.steps[0].context_tokens == 4096
        assert bd.trace.gpu_name == "NVIDIA H200"


def test_tp2_communication_and_imbalance(tp2):
    # Both ranks run the same kernels; compute per step is balanced within 10% ...
    for st in tp2.steps:
        assert st.spread_pct < 10
    # ... while rank 0 spends its decode steps inside all-reduce kernels waiting for rank 1 (host-bound eager).
    for st in tp2.steps[1:]:
        assert st.communication_us_by_rank[0] > 10 * st.compute_us_by_rank[0]
        assert st.communication_us_by_rank[1] < st.compute_us_by_rank[1]
    assert all(share > 0 for share in tp2.communication_share_pct.values())


def test_missing_rank_is_a_warning_not_a_silent_total(tmp_path):
    shutil.copy(TP2 / "rank0.pt.trace.json.gz", tmp_path)
    summary = analyze_ranks(find_trace_files(tmp_path))
    assert any("rank(s) [1] have no trace" in w for w in summary.warnings)


def test_duplicate_rank_and_mixed_runs_are_errors(tmp_path, capsys):
    dup = tmp_path / "dup"
    dup.mkdir()
    shutil.copy(TP2 / "rank0.pt.trace.json.gz", dup / "a.json.gz")
    shutil.copy(TP2 / "rank0.pt.trace.json.gz", dup / "b.json.gz")
    with pytest.raises(PhaseprofError, match="rank 0 appears twice"):
        analyze_ranks(find_trace_files(dup))
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    shutil.copy(TP2 / "rank1.pt.trace.json.gz", mixed)
    shutil.copy(H100_TP4_CUT, mixed)
    assert main(["analyze", str(mixed)]) == 2
    err = capsys.readouterr().err
    assert "different sizes are mixed" in err and len(err.strip().splitlines()) == 1


def test_different_step_counts_warn(tmp_path):
    shutil.copy(TP2 / "rank0.pt.trace.json.gz", tmp_path)
    subprocess.run([sys.executable, str(ROOT / "scripts/cut_trace.py"), "--steps", "0:2",
                    str(TP2 / "rank1.pt.trace.json.gz"), str(tmp_path / "rank1.pt.trace.json.gz")],
                   check=True, capture_output=True)
    summary = analyze_ranks(find_trace_files(tmp_path))
    assert any("different step counts" in w for w in summary.warnings)
    assert len(summary.steps) == 2


def test_cli_prints_the_rank_table(capsys):
    assert main(["analyze", str(TP2)]) == 0
    out = capsys.readouterr().out
    assert "ranks (2 of world size 2)" in out and "load imbalance per step" in out
