"""phaseprof.analysis.timeline: one step laid out in time, consistent with the breakdown's own numbers."""

from __future__ import annotations

import numpy as np
import pytest

from phaseprof.analysis.pipeline import analyze
from phaseprof.analysis.timeline import IdleCause, idle_segments, step_timeline
from phaseprof.classify.rules import load_rules
from phaseprof.errors import PhaseprofError
from phaseprof.trace.markers import phaseprof_step_name
from phaseprof.trace.read import load_tables
from tests.conftest import REPO
from tests.builders import TraceBuilder

GEMM = "nvjet_tst_128x64_64x8_2x1_v_bz_TNT"
LO, HW, OT = IdleCause.LAUNCH_OVERHEAD.value, IdleCause.HOST_WORK.value, IdleCause.OTHER.value


def a(*xs: int) -> np.ndarray:
    return np.array(xs, dtype=np.int64)


def test_idle_segments_cut_gaps_by_cause():
    # gap [0,12): starved until 10, a launch call covers [2,10) -> host 0-2, launch 2-10, queued 10-12
    # gap [20,41): starved until 40, launch call [30,40) -> host 20-30, launch 30-40, queued 40-41
    seg = idle_segments(gap_starts=a(0, 20), gap_ends=a(12, 41), starved_ends=a(10, 40),
                        launch_starts=a(2, 30), launch_ends=a(10, 40))
    assert seg[["ts_ns", "end_ns", "cause", "gap"]].values.tolist() == [
        [0, 2, HW, 0], [2, 10, LO, 0], [10, 12, OT, 0],
        [20, 30, HW, 1], [30, 40, LO, 1], [40, 41, OT, 1]]


def test_idle_segments_merge_touching_launch_calls_and_ignore_calls_outside_gaps():
    seg = idle_segments(gap_starts=a(100), gap_ends=a(200), starved_ends=a(150),
                        launch_starts=a(0, 110, 120, 300), launch_ends=a(50, 120, 130, 400))
    assert seg[["ts_ns", "end_ns", "cause"]].values.tolist() == [
        [100, 110, HW], [110, 130, LO], [130, 150, HW], [150, 200, OT]]


def test_idle_segments_empty():
    assert idle_segments(gap_starts=a(), gap_ends=a(), starved_ends=a(), launch_starts=a(),
                         launch_ends=a()).empty


def test_step_timeline_on_an_inline_trace(tmp_path):
    b = TraceBuilder()
    b.annotation(phaseprof_step_name(0, 1, 128, 0, 0), 0, 100)
    b.launch(GEMM, host_ts=0, host_dur=10, gpu_ts=12, gpu_dur=8)                 # gap [0,12)
    b.launch(GEMM, host_ts=30, host_dur=10, gpu_ts=41, gpu_dur=9, stream=13)     # gap [20,41); tail [50,100)
    t = load_tables(b.write(tmp_path / "t.json"))
    tl = step_timeline(analyze(t, ruleset=load_rules()).timeline, step=0)
    assert (tl.start_ns, tl.end_ns, tl.busy_ns) == (0, 100_000, 17_000)
    assert tl.activities[["lane", "kernel_bucket", "ts_ns", "launch_api"]].values.tolist() == [
        ["stream 7", "gemm", 12_000, "cudaLaunchKernel"], ["stream 13", "gemm", 41_000, "cudaLaunchKernel"]]
    assert tl.host_calls[["name", "kind", "ts_ns", "end_ns"]].values.tolist() == [
        ["cudaLaunchKernel", "launch", 0, 10_000], ["cudaLaunchKernel", "launch", 30_000, 40_000]]
    assert tl.idle[["ts_ns", "end_ns", "cause"]].values.tolist() == [
        [0, 10_000, LO], [10_000, 12_000, OT], [20_000, 30_000, HW], [30_000, 40_000, LO], [40_000, 41_000, OT],
        [50_000, 100_000, OT]]
    assert tl.idle_ns_by_cause() == {LO: 20_000, HW: 10_000, OT: 53_000}
    assert tl.gaps["cause"].tolist() == [LO, LO, OT]
    with pytest.raises(PhaseprofError, match="step 1 does not exist"):
        step_timeline(analyze(t, ruleset=load_rules()).timeline, step=1)


def _check_against_breakdown(path):
    """Every step's window, busy time and idle causes equal the breakdown's step row."""
    t = load_tables(path)
    rules = load_rules()
    at = analyze(t, ruleset=rules)
    bd, ix = at.breakdown, at.timeline
    assert len(ix.steps) == len(bd.steps)
    for row in bd.steps:
        tl = step_timeline(ix, step=row.index)
        idle = tl.idle_ns_by_cause()
        assert tl.start_ns / 1e3 == pytest.approx(row.start_us, abs=1e-3)
        assert tl.wall_ns / 1e3 == pytest.approx(row.wall_us, abs=1e-3)
        assert tl.busy_ns / 1e3 == pytest.approx(row.gpu_busy_us, abs=1e-3)
        assert idle[LO] / 1e3 == pytest.approx(row.idle.launch_overhead_us, abs=1e-3)
        assert idle[HW] / 1e3 == pytest.approx(row.idle.host_work_us, abs=1e-3)
        assert idle[OT] / 1e3 == pytest.approx(row.idle.other_us, abs=1e-3)
        assert len(tl.activities) == row.kernels + row.memcpy_count + row.memset_count \
            if bd.trace.device == "gpu" else True
        assert (tl.host_calls["kind"] == "launch").sum() == row.launches.total


COMMITTED = sorted(p for p in (REPO / "traces").rglob("*.json.gz") if not p.name.startswith("."))


@pytest.mark.parametrize("path", COMMITTED, ids=[p.relative_to(REPO / "traces").as_posix() for p in COMMITTED])
def test_step_timelines_match_the_breakdown_on_committed_traces(path):
    _check_against_breakdown(path)


def test_step_timelines_match_the_breakdown_on_public_traces(public_trace):
    _check_against_breakdown(public_trace)


def test_cpu_only_trace_lays_ops_out_per_thread(tmp_path):
    b = TraceBuilder()
    b.annotation(phaseprof_step_name(0, 1, 16, 0, 0), 0, 100)
    b.op("aten::mm", 10, 30, tid=1)
    b.op("aten::add", 60, 10, tid=2)
    t = load_tables(b.write(tmp_path / "cpu.json"))
    tl = step_timeline(analyze(t, ruleset=load_rules()).timeline, step=0)
    assert tl.activities[["lane", "name", "ts_ns"]].values.tolist() == [
        ["thread 1", "aten::mm", 10_000], ["thread 2", "aten::add", 60_000]]
    assert tl.host_calls.empty
    assert tl.idle_ns_by_cause() == {LO: 0, HW: 100_000 - 40_000, OT: 0}
    _check_against_breakdown(tmp_path / "cpu.json")
