"""Expert-parallel dispatch/combine vs MoE compute: hand-made timelines with the expected split, the real TP2 H200
capture (no expert parallelism: nothing may be invented), DeepSeek's public EP64 profile (DeepEP kernels) and
the run records that say whether a run was expert-parallel."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from phaseprof.scale.ranks import analyze_ranks, find_trace_files
from phaseprof.scale.collectives import match_collectives
from phaseprof.scale.expert_parallel import NONE_FOUND
from phaseprof.scale.families import context_rules, families
from phaseprof.scale.rank_task import _moe_around, analyze_rank
from phaseprof.scale.render import collectives_markdown, print_collectives, print_expert_parallel
from phaseprof.scale.report import build_report
from phaseprof.scale.run_parallel import declared_expert_parallel

from .rank_builders import rank as _rank

ROOT = Path(__file__).resolve().parents[2]
TP2 = ROOT / "traces/h200x2/tp2-eager-prefill4096-decode8"
CLI_TP2 = ROOT / "traces/h200x2/cli-tp2-eager-decode-2048in-4out"
SERVE_EP = Path(__file__).with_name("data") / "serve-tp2-ep.json"
DEEPSEEK = ROOT.parent / "shared/traces/public/deepseek-profile-data__train.json.gz"


def _tp_ep(ep):
    """Two ranks, one step, three layers: an attention all-reduce (no MoE before it), then the MoE and the
    all-reduce that combines the experts' outputs. Rank 1's experts take longer in every layer; rank 0 arrives
    at each combine first and waits for it. MoE time before each collective in us, times in ns."""
    r0 = _rank([("all_reduce", 0, 0, 10), ("all_reduce", 0, 100, 200),
                ("all_reduce", 0, 300, 310), ("all_reduce", 0, 400, 500),
                ("all_reduce", 0, 600, 610), ("all_reduce", 0, 700, 800)],
               moe_before=[0, 50, 0, 50, 0, 50], moe_by_step={0: 150.0}, ep=ep)
    r1 = _rank([("all_reduce", 0, 0, 10), ("all_reduce", 0, 140, 200),
                ("all_reduce", 0, 300, 310), ("all_reduce", 0, 420, 500),
                ("all_reduce", 0, 600, 610), ("all_reduce", 0, 760, 800)],
               moe_before=[0, 90, 0, 70, 0, 110], moe_by_step={0: 270.0}, ep=ep)
    return match_collectives({0: r0, 1: r1}, clock="test").expert_parallel


def test_tp_ep_combine_is_the_all_reduce_after_the_moe_and_tracks_the_busiest_rank():
    ep = _tp_ep(True)
    assert ep.found and ep.declared is True
    assert (ep.dispatch_instances, ep.combine_instances) == (0, 3)  # the attention all-reduces are not EP
    assert ep.how == {"all_reduce combine (place)": 3}
    assert any("no dispatch kernel" in n for n in ep.notes)
    (st,) = ep.steps
    assert st.busiest_rank == 1 and st.combine_late_rank == 1
    # Rank 0 waits 40 + 20 + 60 ns for rank 1; the rest of each combine kernel (60 + 80 + 40 ns) is transfer.
    assert st.combine_wait_us_by_rank == pytest.approx({0: 0.12, 1: 0.0})
    assert st.combine_transfer_us_by_rank == pytest.approx({0: 0.18, 1: 0.18})
    assert st.moe_us_by_rank == {0: 150.0, 1: 270.0}
    t = ep.tracking
    assert (t.combine_instances, t.late_is_busiest, t.instance_points) == (3, 3, 3)
    # Rank 0's waits (40, 20, 60 ns) follow its MoE deficit (40, 20, 60 us) exactly.
    assert t.instance_wait_vs_moe_gap_r == pytest.approx(1.0)
    assert t.step_wait_vs_moe_gap_r is None and t.step_points == 1  # one step: no correlation across steps
    # Deficits of 40/20/60 us cover all of the 40/20/60 ns waits.
    assert t.combine_wait_us == pytest.approx(0.12) and t.moe_explains_pct == pytest.approx(100.0)


@pytest.mark.parametrize("declared", [False, None])
def test_without_an_ep_record_the_all_reduce_after_the_moe_is_not_ep(declared):
    ep = _tp_ep(declared)
    assert not ep.found and ep.summary.startswith(NONE_FOUND) and ep.steps == [] and ep.tracking is None
    assert ep.notes and "3 all_reduce combine" in ep.notes[0]


def test_cached_notify_takes_the_role_of_the_next_deepep_kernel():
    r = _rank([("ep_dispatch", 0, 0, 10), ("ep_dispatch", 0, 10, 30), ("ep_notify", 0, 40, 45),
               ("ep_combine", 0, 50, 90), ("ep_notify", 0, 100, 105), ("ep_dispatch", 0, 110, 130)])
    ep = match_collectives({0: r}, clock="test").expert_parallel
    assert ep.how == {"ep_combine combine (name)": 1, "ep_dispatch dispatch (name)": 3,
                      "ep_notify combine (name)": 1, "ep_notify dispatch (name)": 1}
    assert ep.declared is None  # named kernels need no record
    assert ep.dispatch_transfer_us_by_rank[0] == pytest.approx(0.055)  # 10 + 20 + 5 + 20 ns
    assert ep.combine_transfer_us_by_rank[0] == pytest.approx(0.045)
    assert any("one rank" in n for n in ep.notes)


def test_moe_time_around_each_collective():
    # Collectives at [100, 200) and [300, 400); MoE kernels at [20, 60), [250, 280) and [390, 450) (overlaps the
    # second collective, on another stream): only the gaps between collectives count.
    before, after = _moe_around(np.array([100, 300]), np.array([200, 400]), np.array([20, 250, 390]),
                                np.array([60, 280, 450]), 0, 500)
    assert before.tolist() == pytest.approx([0.04, 0.03]) and after.tolist() == pytest.approx([0.03, 0.05])


def test_context_rules_name_known_families_and_every_family_has_a_role():
    assert context_rules()
    assert all(f.role for f in families())


def test_run_records_say_whether_a_run_was_expert_parallel(tmp_path):
    ranks = tmp_path / "ep" / "traces"
    ranks.mkdir(parents=True)
    shutil.copy(SERVE_EP, tmp_path / "ep" / "serve.json")  # the real TP2 + EP server record
    assert declared_expert_parallel(ranks / "rank0.pt.trace.json.gz") is True
    tp = tmp_path / "tp"
    tp.mkdir()
    shutil.copy(TP2 / "tp_run.json", tp)
    assert declared_expert_parallel(tp / "rank0.pt.trace.json.gz") is False
    cli = tmp_path / "cli" / "ranks"
    cli.mkdir(parents=True)
    shutil.copy(CLI_TP2 / "run.json", cli.parent)  # phaseprof capture: run.json beside ranks/
    assert declared_expert_parallel(cli / "rank0.pt.trace.json.gz") is False
    assert declared_expert_parallel(tmp_path / "x.json.gz") is None


@pytest.fixture(scope="module")
def tp2():
    return analyze_ranks(find_trace_files(TP2))


def test_tp2_without_expert_parallelism_finds_none(tp2):
    ep = tp2.collectives.expert_parallel
    assert not ep.found and ep.declared is False and ep.dispatch_instances == ep.combine_instances == 0
    assert ep.summary.startswith(NONE_FOUND)
    # One all-reduce after each of the 40 MoE blocks per step (vllm::moe_forward_shared runs 40 times a step), in
    # the 2 steps the rank files keep: the tensor-parallel MoE reduce, named only as what it would be under EP.
    assert "80 all_reduce combine" in ep.notes[0]
    report = build_report(tp2)
    assert NONE_FOUND in collectives_markdown(report)
    console = Console(width=80, record=True, force_terminal=False)
    print_collectives(report, console)
    text = console.export_text()
    assert NONE_FOUND in text.replace("\n", " ") and max(map(len, text.splitlines())) <= 80


def test_an_ep_table_fits_80_columns():
    console = Console(width=80, record=True, force_terminal=False)
    print_expert_parallel(_tp_ep(True), console)
    text = console.export_text()
    assert "c.wait" in text and "last rank to arrive" in text
    assert max(map(len, text.splitlines())) <= 80


@pytest.mark.skipif(not DEEPSEEK.is_file(), reason="public traces (../shared) not present")
def test_deepseek_ep64_deepep_dispatch_and_combine():
    """DeepSeek's public EP64 training profile (rank 0 of 64, H800): DeepEP internode kernels on their own
    stream. One rank: roles and kernel time, no wait split."""
    ep = match_collectives({0: analyze_rank(DEEPSEEK).collectives}, clock="test").expert_parallel
    assert ep.found
    assert ep.how == {"ep_combine combine (name)": 8, "ep_dispatch dispatch (name)": 12,
                      "ep_notify combine (name)": 8, "ep_notify dispatch (name)": 4}
    events = json.loads(gzip.open(DEEPSEEK).read())["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel" and "::ep::internode::" in e["name"]]
    total = sum(e["dur"] for e in kernels)
    assert ep.dispatch_transfer_us_by_rank[0] + ep.combine_transfer_us_by_rank[0] == pytest.approx(total)
    combine = sum(e["dur"] for e in kernels if "::combine<" in e["name"])
    assert ep.combine_transfer_us_by_rank[0] > combine  # plus the cached_notify kernels before each combine


TP2_EP = ROOT / "traces/h200x2/server-tp2-ep/decode-step1"


@pytest.fixture(scope="module")
def tp2_ep():
    return analyze_ranks(find_trace_files(TP2_EP))


def test_tp2_ep_decode_on_two_h200s_combines_with_the_all_reduce_after_each_moe_block(tp2_ep):
    """The real TP2 + --enable-expert-parallel capture (vLLM 0.23, eager, dp 1): no dispatch kernel; the combine
    is the all-reduce after each MoE block, and the combine wait there is the late rank's host work, not MoE."""
    c = tp2_ep.collectives
    ep = c.expert_parallel
    assert ep.declared is True and ep.found  # serve.json above ranks/ says enable_expert_parallel
    assert ep.dispatch_instances == 0 and set(ep.how) == {"all_reduce combine (place)"}
    # One combine per MoE block (40 blocks, one nn.Module scope each); the other all-reduces (attention and GDN
    # outputs) are not EP.
    moe_blocks = _count_module_scopes(next(TP2_EP.glob("*rank0*")), "Qwen3NextSparseMoeBlock_")
    assert moe_blocks == 40
    assert ep.combine_instances == moe_blocks and c.instances_by_family["all_reduce"] > moe_blocks
    (st,) = ep.steps
    for r, bd in tp2_ep.ranks.items():
        assert st.moe_us_by_rank[r] == bd.steps[0].kernel_view_us["moe"]
        # The combines are part of the rank's collective time, split the same way.
        assert st.combine_wait_us_by_rank[r] <= c.wait_us_by_rank[r] + 1e-6
        assert st.combine_transfer_us_by_rank[r] <= c.transfer_us_by_rank[r] + 1e-6
    assert st.busiest_rank == max(st.moe_us_by_rank, key=st.moe_us_by_rank.get)
    # The rank the others wait for at the combines is the step's late rank, and it is late for host work.
    assert st.combine_late_rank == c.steps[0].late_rank
    assert c.steps[0].late_cause.host_work_us > c.steps[0].late_cause.compute_us
    assert ep.tracking.combine_instances == moe_blocks and ep.tracking.moe_explains_pct < 5


def _count_module_scopes(path: Path, prefix: str) -> int:
    events = json.loads(gzip.open(path).read())["traceEvents"]
    return sum(1 for e in events if e.get("cat") == "python_function"
               and e.get("name", "").startswith(f"nn.Module: {prefix}"))
