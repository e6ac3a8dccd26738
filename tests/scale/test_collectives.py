"""Who waits for whom: hand-made collective timelines with the expected split, and the real TP2 H200 capture."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from phaseprof.analysis import intervals as iv
from phaseprof.scale.collectives import match_collectives
from phaseprof.scale.families import FALLBACK, collective_family, families
from phaseprof.scale.ranks import analyze_ranks, find_trace_files

from .rank_builders import rank as _rank

ROOT = Path(__file__).resolve().parents[2]
TP2 = ROOT / "traces/h200x2/tp2-eager-prefill4096-decode8"


def test_split_of_one_all_reduce():
    # Rank 0 arrives at 100 and spins until rank 1 arrives at 1,100; both then move data until 1,300.
    # Rank 1 was late by 1,000 ns: 400 computing, 200 inside launch calls with an idle GPU, 400 other host work
    # (a launch call at 150..350 overlaps its compute 100..500 for 200 ns and is not counted as launch overhead).
    r0 = _rank([("all_reduce", 0, 100, 1_300)])
    r1 = _rank([("all_reduce", 0, 1_100, 1_300)], compute=[(100, 500)], launches=[(150, 350), (600, 800)])
    rep = match_collectives({0: r0, 1: r1}, clock="test")
    assert rep.matched_instances == 1 and rep.unmatched_instances == 0
    assert rep.wait_us_by_rank == {0: 1.0, 1: 0.0}
    assert rep.transfer_us_by_rank == {0: pytest.approx(0.2), 1: pytest.approx(0.2)}
    assert rep.lateness_us_by_rank == {0: 0.0, 1: 1.0} and rep.late_count_by_rank == {0: 0, 1: 1}
    cause = rep.cause_by_rank[1]
    assert (cause.compute_us, cause.launch_overhead_us, cause.host_work_us) == pytest.approx((0.4, 0.2, 0.4))
    assert rep.steps[0].late_rank == 1 and cause.main in ("compute", "host_work")


def test_instances_match_by_step_family_and_order_not_by_position():
    # Rank 1 has an extra all_gather in step 0: the all_reduces still pair up, the extra one is reported.
    r0 = _rank([("all_reduce", 0, 0, 10), ("all_reduce", 1, 100, 110)])
    r1 = _rank([("all_gather", 0, 0, 5), ("all_reduce", 0, 6, 10), ("all_reduce", 1, 100, 110)])
    rep = match_collectives({0: r0, 1: r1}, clock="test")
    assert rep.matched_instances == 2 and rep.unmatched_instances == 1
    assert rep.instances_by_family == {"all_reduce": 2}
    assert rep.wait_us_by_rank[0] == pytest.approx(0.006)  # waited from 0 to 6 in step 0, none in step 1
    assert any("no counterpart" in n for n in rep.notes)


def test_a_kernel_shorter_than_the_lateness_is_all_wait():
    # Wait is capped at the kernel's own duration: a rank cannot wait longer than it spins.
    rep = match_collectives({0: _rank([("all_reduce", 0, 0, 50)]), 1: _rank([("all_reduce", 0, 100, 130)])},
                            clock="test")
    assert rep.wait_us_by_rank[0] == pytest.approx(0.05) and rep.transfer_us_by_rank[0] == 0


def test_every_family_rule_matches_its_real_examples():
    for fam in families():
        assert fam.examples, fam.name
        for ex in fam.examples:
            assert collective_family(ex) == fam.name, ex
    assert collective_family("ncclDevKernel_Generic_2(ncclDevKernelArgsStorage<4096ul>)") == FALLBACK


def _brute_intersection(a, b):
    pts = set()
    for s, e in a:
        pts.update(range(s, e))
    qts = set()
    for s, e in b:
        qts.update(range(s, e))
    return len(pts & qts)


@pytest.mark.parametrize("seed", range(30))
def test_intersect_against_brute_force(seed):
    rng = np.random.default_rng(seed)
    def rand(n):
        s = rng.integers(0, 200, n)
        return s, s + rng.integers(0, 30, n)
    a, b = rand(rng.integers(0, 12)), rand(rng.integers(0, 12))
    s, e = iv.intersect(a[0], a[1], b[0], b[1])
    assert np.all(e > s) and np.all(s[1:] >= e[:-1])  # sorted, disjoint, non-empty
    assert int((e - s).sum()) == _brute_intersection(list(zip(*a)), list(zip(*b)))


@pytest.fixture(scope="module")
def tp2():
    return analyze_ranks(find_trace_files(TP2))


def test_tp2_decode_rank0_waits_for_rank1_host(tp2):
    """Eager TP2 decode on two H200s: rank 0's all-reduce time is rank 1 arriving late because of host work."""
    c = tp2.collectives
    assert c is not None and c.unmatched_instances == 0
    assert set(c.instances_by_family) == {"all_reduce", "all_gather"}
    for st in c.steps[1:]:  # decode steps
        assert st.late_rank == 1
        assert st.wait_us_by_rank[0] > 20 * st.wait_us_by_rank[1]
        assert st.late_cause.host_work_us > st.late_cause.compute_us
    # Per rank, wait + transfer is exactly the rank's matched collective kernel time.
    for r, bd in tp2.ranks.items():
        comm = sum(s.communication_us_by_rank[r] for s in tp2.steps)
        assert c.wait_us_by_rank[r] + c.transfer_us_by_rank[r] == pytest.approx(comm, rel=1e-6)
    # The late rank's lateness equals the other rank's wait when there are two ranks and no wait is capped.
    assert c.lateness_us_by_rank[1] == pytest.approx(c.wait_us_by_rank[0], rel=0.01)
