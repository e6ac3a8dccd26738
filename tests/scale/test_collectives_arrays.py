"""``scale.collectives.match_collectives`` (every instance and rank at once, as arrays) gives exactly what the loop
over instances and ranks it replaced gives (kept verbatim below as the reference): the same report, every float to
the last bit, on the committed two-rank traces and on 16 synthetic ranks with jitter, ties between ranks, missing
and extra instances, and steps outside every step (-1)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from phaseprof.analysis import intervals as iv
from phaseprof.scale.collectives import CollectiveReport, CollectiveStep, LateCause, _US, match_collectives
from phaseprof.scale.expert_parallel import expert_parallel_report
from phaseprof.scale.instances import Instance
from phaseprof.scale.rank_task import RankCollectives

from .rank_builders import rank

REPO = Path(__file__).resolve().parents[2]


def _keys(c: RankCollectives) -> np.ndarray:
    """``step|family|k`` for each instance: its k-th occurrence of that family within its step."""
    out = np.empty(c.step.size, dtype=object)
    seen: dict[tuple[int, str], int] = {}
    for i, (s, f) in enumerate(zip(c.step.tolist(), c.family.tolist())):
        k = seen.get((s, f), 0)
        seen[(s, f)] = k + 1
        out[i] = (s, f, k)
    return out



def _cause(c: RankCollectives, both: tuple[np.ndarray, np.ndarray], lo: np.ndarray, hi: np.ndarray) -> LateCause:
    """Split the windows ``[lo, hi)`` of one rank into compute / launch overhead / host work (summed).
    ``both``: the rank's launch calls intersected with its compute (launch time hidden behind GPU work)."""
    if lo.size == 0:
        return LateCause()
    total = (hi - lo).astype(np.float64)
    compute = iv.overlap_with_union(lo, hi, c.compute_start_ns, c.compute_end_ns).astype(np.float64)
    # Launch calls only explain lateness while the GPU was idle: drop the part that overlapped compute.
    both_s, both_e = both
    launch = float(iv.overlap_with_union(lo, hi, c.launch_start_ns, c.launch_end_ns).sum()
                   - iv.overlap_with_union(lo, hi, both_s, both_e).sum())
    comp = float(compute.sum())
    return LateCause(comp * _US, launch * _US, max(float(total.sum()) - comp - launch, 0.0) * _US)



def reference_match_collectives(by_rank: dict[int, RankCollectives], *, clock: str) -> CollectiveReport:
    """Match every rank's collective instances and split their time into wait and transfer."""
    ranks = sorted(by_rank)
    keys = {r: _keys(by_rank[r]) for r in ranks}
    index = {r: {k: i for i, k in enumerate(keys[r].tolist())} for r in ranks}
    common = set(index[ranks[0]])
    for r in ranks[1:]:
        common &= set(index[r])
    common_sorted = sorted(common, key=lambda k: (k[0], by_rank[ranks[0]].start_ns[index[ranks[0]][k]]))
    unmatched = sum(len(index[r]) - len(common) for r in ranks)
    z = {r: 0.0 for r in ranks}
    wait, transfer, late, late_n, early = dict(z), dict(z), dict(z), {r: 0 for r in ranks}, dict(z)
    fam: dict[str, int] = {}
    per_step: dict[int, dict] = {}
    instances: list[Instance] = []
    windows: dict[int, tuple[list[int], list[int], list[int]]] = {r: ([], [], []) for r in ranks}  # lo, hi, step
    for key in common_sorted:
        step, family, _ = key
        fam[family] = fam.get(family, 0) + 1
        rows = {r: index[r][key] for r in ranks}
        start = {r: int(by_rank[r].start_ns[rows[r]]) for r in ranks}
        end = {r: int(by_rank[r].end_ns[rows[r]]) for r in ranks}
        last_r = max(ranks, key=lambda r: (start[r], r))
        last, first = start[last_r], min(start.values())
        ps = per_step.setdefault(step, {"n": 0, "wait": dict(z), "transfer": dict(z), "late": dict(z)})
        ps["n"] += 1
        waits = {}
        for r in ranks:
            dur = end[r] - start[r]
            w = min(max(last - start[r], 0), dur)
            early[r] += max(last - start[r], 0) * _US
            waits[r] = w
            wait[r] += w * _US
            transfer[r] += (dur - w) * _US
            ps["wait"][r] += w * _US
            ps["transfer"][r] += (dur - w) * _US
        instances.append(Instance(step=step, family=family, rows=rows, start_ns=start, wait_ns=waits,
                                  dur_ns={r: end[r] - start[r] for r in ranks}))
        if last > first:
            late[last_r] += (last - first) * _US
            late_n[last_r] += 1
            ps["late"][last_r] += (last - first) * _US
            lo, hi, st = windows[last_r]
            lo.append(first)
            hi.append(last)
            st.append(step)
    cause_by_rank: dict[int, LateCause] = {}
    cause_by_rank_step: dict[tuple[int, int], LateCause] = {}
    for r in ranks:
        c = by_rank[r]
        both = iv.intersect(c.launch_start_ns, c.launch_end_ns, c.compute_start_ns, c.compute_end_ns)
        lo, hi, st = (np.asarray(a, dtype=np.int64) for a in windows[r])
        cause_by_rank[r] = _cause(c, both, lo, hi)
        for s in np.unique(st).tolist():
            sel = st == s
            cause_by_rank_step[(r, s)] = _cause(c, both, lo[sel], hi[sel])
    steps = []
    for s in sorted(per_step):
        ps = per_step[s]
        lr = max(ranks, key=lambda r: ps["late"][r]) if any(ps["late"].values()) else None
        steps.append(CollectiveStep(step=s, instances=ps["n"], wait_us_by_rank=ps["wait"],
                                    transfer_us_by_rank=ps["transfer"], lateness_us_by_rank=ps["late"],
                                    late_rank=lr,
                                    late_cause=cause_by_rank_step.get((lr, s), LateCause()) if lr is not None
                                    else LateCause()))
    notes = []
    if unmatched:
        notes.append(f"{unmatched} collective kernel(s) have no counterpart on every rank (different counts per "
                     "step and family) and are left out of the wait/transfer split")
    return CollectiveReport(matched_instances=len(common), unmatched_instances=unmatched, instances_by_family=fam,
                            wait_us_by_rank=wait, transfer_us_by_rank=transfer, lateness_us_by_rank=late,
                            late_count_by_rank=late_n, cause_by_rank=cause_by_rank, steps=steps, clock=clock,
                            notes=notes, expert_parallel=expert_parallel_report(by_rank, instances),
                            early_us_by_rank=early)


FAMILIES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")


def synthetic(seed: int, n_ranks: int = 16, steps: int = 6, per_step: int = 40) -> dict[int, RankCollectives]:
    """Ranks issuing the same collectives (some ranks one more or one fewer), each arriving with jitter; rank 0's
    starts distinct within a step (the reference orders ties there by a set's order)."""
    rng = np.random.default_rng(seed)
    plan = [(int(s), FAMILIES[int(f)]) for s in range(-1, steps) for f in rng.integers(0, len(FAMILIES), per_step)]
    out = {}
    for r in range(n_ranks):
        colls, t = [], 0
        for i, (s, f) in enumerate(plan):
            if r and rng.random() < 0.02:
                continue  # a collective this rank lacks
            t += int(rng.integers(5, 50)) * 1000
            start = t + (int(rng.integers(0, 3)) * 500 if r else 0)  # other ranks tie now and then
            dur = int(rng.integers(0, 40)) * 100
            colls.append((f, s, start, start + dur))
            if r == n_ranks - 1 and rng.random() < 0.01:
                colls.append((f, s, start + 10, start + 20))  # an extra one
        compute = [(int(a), int(a) + 3000) for a in range(0, t, 7000)]
        launches = [(int(a), int(a) + 800) for a in range(1000, t, 5000)]
        out[r] = rank(colls, compute, launches)
    return out


@pytest.mark.parametrize("seed", range(6))
def test_as_the_loop_on_synthetic_ranks(seed: int) -> None:
    by_rank = synthetic(seed)
    got, want = match_collectives(by_rank, clock="c"), reference_match_collectives(by_rank, clock="c")
    assert want.matched_instances > 100 and want.unmatched_instances > 0
    assert got == want


def test_as_the_loop_with_two_and_three_ranks_and_nothing_matched() -> None:
    for n in (2, 3):
        by_rank = synthetic(7, n_ranks=n)
        assert match_collectives(by_rank, clock="c") == reference_match_collectives(by_rank, clock="c")
    apart = {0: rank([("all_reduce", 0, 0, 10)]), 1: rank([("all_gather", 0, 0, 10)])}
    got = match_collectives(apart, clock="c")
    assert got == reference_match_collectives(apart, clock="c") and got.matched_instances == 0


def test_as_the_loop_on_the_committed_rank_traces() -> None:
    from phaseprof.scale.local import analyze_rank_files

    dirs = sorted({p.parent for p in (REPO / "traces" / "h200x2").rglob("*rank*.json.gz")})
    compared = 0
    for d in dirs:
        files = sorted(d.glob("*rank*.json.gz"))
        if len(files) < 2:
            continue
        res = analyze_rank_files(files, jobs=1)
        by_rank = {i: r.collectives for i, r in enumerate(res)}
        if not all(c.start_ns.size for c in by_rank.values()):
            continue
        compared += 1
        assert match_collectives(by_rank, clock="c") == reference_match_collectives(by_rank, clock="c"), d.name
    assert compared >= 2  # the TP2 and TP2+EP captures


def test_rank_facts_are_derived_in_the_worker_and_only_read_by_the_parent(monkeypatch: pytest.MonkeyPatch) -> None:
    """``rank_result`` derives each rank's hidden launch time and EP roles where the rank is analysed; they travel
    with the pickled result (what a worker process sends), equal to a fresh derivation, and matching the ranks
    computes neither again."""
    import dataclasses
    import pickle

    from phaseprof.scale import rank_task
    from phaseprof.scale.rank_task import analyze_rank

    d = REPO / "traces" / "h200x2" / "server-tp2-ep" / "decode-step1"
    sent = [analyze_rank(p) for p in sorted(d.glob("*rank*.json.gz"))]
    got = [pickle.loads(pickle.dumps(r)).collectives for r in sent]
    for c in got:
        assert {"launch_hidden_ns", "ep_roles"} <= set(vars(c))
        fresh = RankCollectives(**{f.name: getattr(c, f.name) for f in dataclasses.fields(c)})
        assert "launch_hidden_ns" not in vars(fresh)
        for a, b in zip(c.launch_hidden_ns, fresh.launch_hidden_ns):
            np.testing.assert_array_equal(a, b)
        assert c.ep_roles == fresh.ep_roles and any(r is not None for r in c.ep_roles[1])  # the combines
    by_rank = dict(enumerate(got))
    expected = reference_match_collectives(by_rank, clock="c")

    def not_again(*_a: object, **_k: object) -> None:
        raise AssertionError("derived again in the parent")

    monkeypatch.setattr(iv, "intersect", not_again)
    monkeypatch.setattr(rank_task, "row_roles", not_again)
    assert match_collectives(by_rank, clock="c") == expected
