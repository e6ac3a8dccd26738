"""Multi-rank runs: the real TP2 capture on two H200s, and the ways rank files go wrong."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from phaseprof.scale.ranks import analyze_ranks, find_trace_files
from phaseprof.commands.main import main
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
        assert [s.phase for s in bd.steps] == ["prefill", "decode"]  # the cut keeps the prefill and decode step 1
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
    subprocess.run([sys.executable, str(ROOT / "scripts/cut_trace.py"), "--steps", "0:1",
                    str(TP2 / "rank1.pt.trace.json.gz"), str(tmp_path / "rank1.pt.trace.json.gz")],
                   check=True, capture_output=True)
    summary = analyze_ranks(find_trace_files(tmp_path))
    assert any("different step counts" in w for w in summary.warnings)
    assert len(summary.steps) == 1


def test_cli_prints_the_rank_table(capsys):
    assert main(["analyze", str(TP2)]) == 0
    out = capsys.readouterr().out
    assert "ranks (2 of world size 2)" in out and "load imbalance per step" in out


PUBLIC_CUTS = ROOT / "traces/public-cut"


@pytest.mark.parametrize("name,world", [("h100_vllm_llama70b_tp4_decode_2steps.json.gz", 4),
                                        ("mi300x_vllm_llama70b_tp4_decode_2steps.json.gz", 4)])
def test_public_tp4_rank0_alone_says_which_ranks_are_missing(tmp_path, name, world):
    shutil.copy(PUBLIC_CUTS / name, tmp_path)
    shutil.copy(PUBLIC_CUTS / name, tmp_path / "copy.json.gz")  # a second file so the directory is a rank set
    with pytest.raises(PhaseprofError, match="rank 0 appears twice"):
        analyze_ranks(find_trace_files(tmp_path))
    (tmp_path / "copy.json.gz").unlink()
    summary = analyze_ranks(find_trace_files(tmp_path))
    assert summary.world_size == world
    assert summary.warnings == [f"world_size is {world} but rank(s) [1, 2, 3] have no trace here: the all-ranks "
                                f"summary covers 1 of {world} ranks"]
    assert summary.communication_share_pct[0] > 1  # all-reduce kernels of tensor parallelism


def test_diff_tp1_against_tp2_of_the_same_model():
    from phaseprof.report.diff import diff_breakdowns, load_side

    (tp1,) = sorted((ROOT / "traces/h200/eager").glob("*prefill-4096"))
    d = diff_breakdowns(load_side(tp1).breakdown, load_side(TP2 / "rank0.pt.trace.json.gz").breakdown)
    assert "world size differs: 1 (A) vs 2 (B)" in d.warnings
    assert not any(w.startswith("mode differs") for w in d.warnings)  # eager vs eager (inferred)
    kv = {r.bucket: r.time_ms for r in d.phase("prefill").kernel_view}
    assert kv["communication"].a == 0 and kv["communication"].b > 5  # ms per step of all-reduce on rank 0
    for bucket in ("gemm", "moe", "gdn", "attention"):  # each rank does about half of the work
        assert -60 < kv[bucket].rel_pct < -30, (bucket, kv[bucket])
