"""Several rank traces of one distributed run (vLLM's profiler writes one file per TP/EP rank).

``analyze_ranks`` analyses each rank with the same pipeline as a single trace, checks that the files belong
together (one run: same world size, distinct ranks, none missing, matching step counts) and summarises
load imbalance: for every step, the slowest rank and by how much it trails the fastest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from phaseprof.analysis.pipeline import AnalysedTrace
from phaseprof.analysis.results import Breakdown
from phaseprof.classify.buckets import Bucket
from phaseprof.errors import PhaseprofError
from phaseprof.inputs import scan_traces
from phaseprof.scale.collectives import CollectiveReport, match_collectives
from phaseprof.scale.local import analyze_rank_files
from phaseprof.scale.rank_task import RankResult, rank_result



@dataclass(frozen=True)
class StepImbalance:
    """One step across ranks. Compute = GPU busy minus communication kernels: a rank that finishes its compute
    early spends the difference inside NCCL/all-reduce kernels waiting for the others, so comparing plain busy
    time would blame the waiting rank."""

    step: int
    slowest_rank: int  # most compute time in this step
    fastest_rank: int
    compute_us_by_rank: dict[int, float]
    communication_us_by_rank: dict[int, float]
    spread_us: float  # slowest minus fastest compute time in this step
    spread_pct: float  # spread relative to the mean compute time across ranks


@dataclass(frozen=True)
class RankSummary:
    world_size: int
    ranks: dict[int, Breakdown]
    steps: list[StepImbalance]
    communication_share_pct: dict[int, float]  # comm kernels' busy time / GPU busy, per rank
    communication_overlap_pct: dict[int, float]  # share of comm time that overlapped compute kernels
    warnings: list[str] = field(default_factory=list)
    collectives: CollectiveReport | None = None  # who waited for whom (None: no collective on every rank)
    analysed_on: dict[int, str] = field(default_factory=dict)  # rank -> host whose process analysed its file
    paths: dict[int, str] = field(default_factory=dict)  # rank -> trace file


def find_trace_files(directory: Path) -> list[Path]:
    """Trace files directly inside ``directory`` (``inputs.scan_traces``: by content), sorted by name;
    PhaseprofError when it is not a directory or holds none (naming the JSON files skipped as no trace)."""
    if not directory.is_dir():
        raise PhaseprofError("not a directory", path=directory)
    scanned = scan_traces(directory)
    if not scanned.traces:
        raise scanned.none_error(directory)
    return list(scanned.traces)


#: The most ranks one multi-rank report takes (2**16: far above today's largest deployments, and small enough that
#: listing the ranks without a trace stays cheap; a world_size of 2**62 once made that list exhaust memory).
MAX_WORLD_SIZE = 1 << 16


def _rank_of(bd: Breakdown, path: Path) -> tuple[int, int]:
    """The trace's (rank, world_size) from its distributedInfo: whole numbers with 0 <= rank < world_size, else a
    one-line error (a rank outside the world would be counted as covering a rank that has no trace)."""
    dist = bd.trace.distributed or {}
    rank, world = dist.get("rank"), dist.get("world_size")
    if rank is None or world is None:
        raise PhaseprofError("trace has no distributedInfo rank/world_size: cannot place it among ranks", path=path)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (rank, world)):
        raise PhaseprofError(f"distributedInfo rank {str(rank)[:20]!r} / world_size {str(world)[:20]!r} are not "
                             "whole numbers: cannot place it among ranks", path=path)
    if world > MAX_WORLD_SIZE:  # the coverage check lists the ranks without a trace: bounded, like every count
        raise PhaseprofError(f"distributedInfo world_size {str(world)[:24]} is over {MAX_WORLD_SIZE:,} ranks: not a "
                             "run phaseprof compares", path=path)
    if world < 1 or not 0 <= rank < world:
        raise PhaseprofError(f"distributedInfo rank {rank} is outside [0, world_size {world}): not a rank of this "
                             "run", path=path)
    return int(rank), int(world)


def analyze_ranks(traces: Sequence[Path | AnalysedTrace], *, rules: list[Path] | None = None,
                  jobs: int | None = 1) -> RankSummary:
    """Analyse every rank trace (paths in ``jobs`` worker processes, None = all cores; or traces already
    analysed) and compare them. Raises on mixed runs; warns on partial evidence."""
    paths = [Path(t) for t in traces if not isinstance(t, AnalysedTrace)]
    done = iter(analyze_rank_files(paths, jobs=jobs, rule_files=rules) if paths else [])
    return summarize_ranks([rank_result(t) if isinstance(t, AnalysedTrace) else next(done) for t in traces])


def summarize_ranks(results: list[RankResult]) -> RankSummary:
    """Compare analysed ranks. Raises on mixed runs; warns on partial evidence. Same output whatever analysed
    them (this process, worker processes, Ray tasks): results are placed by rank, not by arrival."""
    by_rank: dict[int, Breakdown] = {}
    worlds: dict[int, list[Path]] = {}
    by_rank_result: dict[int, RankResult] = {}
    for res in results:
        bd, p = res.breakdown, Path(res.path)
        rank, world = _rank_of(bd, p)
        worlds.setdefault(world, []).append(p)
        if rank in by_rank:
            raise PhaseprofError(f"rank {rank} appears twice ({Path(by_rank[rank].trace.path).name} and {p.name}): "
                                 "traces from different runs are mixed in one directory", path=p.parent)
        by_rank[rank] = bd
        by_rank_result[rank] = res
    if len(worlds) > 1:
        desc = "; ".join(f"world_size {w}: {', '.join(x.name for x in ps)}" for w, ps in worlds.items())
        raise PhaseprofError(f"traces from runs of different sizes are mixed ({desc})",
                             path=Path(results[0].path).parent)
    world = next(iter(worlds))
    warnings: list[str] = []
    missing = sorted(set(range(world)) - set(by_rank))
    if missing:
        warnings.append(f"world_size is {world} but rank(s) {missing} have no trace here: the all-ranks summary "
                        f"covers {len(by_rank)} of {world} ranks")
    counts = {r: len(bd.steps) for r, bd in by_rank.items()}
    if len(set(counts.values())) > 1:
        warnings.append(f"ranks have different step counts {counts}: per-step imbalance uses the first "
                        f"{min(counts.values())} steps of each")
    n_steps = min(counts.values())
    steps = []
    for k in range(n_steps):
        comm = {r: bd.steps[k].kernel_view_us.get(Bucket.COMMUNICATION, 0.0) for r, bd in sorted(by_rank.items())}
        busy = {r: bd.steps[k].gpu_busy_us - comm[r] for r, bd in sorted(by_rank.items())}
        vals = np.array(list(busy.values()))
        slow, fast = max(busy, key=busy.get), min(busy, key=busy.get)
        spread = float(vals.max() - vals.min())
        steps.append(StepImbalance(k, slow, fast, busy, comm, spread,
                                   float(100 * spread / vals.mean()) if vals.mean() else 0.0))
    share, overlap = {}, {}
    for r, bd in sorted(by_rank.items()):
        t = bd.totals
        share[r] = 100 * t.get("communication_busy_us", 0.0) / t["gpu_busy_us"] if t["gpu_busy_us"] else 0.0
        cb = t.get("communication_busy_us", 0.0)
        overlap[r] = 100 * t.get("communication_overlapped_us", 0.0) / cb if cb else 0.0
    collectives = None
    if len(by_rank) > 1 and all(r.collectives.start_ns.size for r in by_rank_result.values()):
        clock = ("ranks compared on their trace clocks; valid for ranks of one host (Kineto stamps GPU work on the "
                 "host clock), only as good as clock sync across hosts")
        collectives = match_collectives({k: r.collectives for k, r in sorted(by_rank_result.items())}, clock=clock)
        warnings.extend(collectives.notes)
    return RankSummary(world_size=world, ranks=dict(sorted(by_rank.items())), steps=steps,
                       communication_share_pct=share, communication_overlap_pct=overlap, warnings=warnings,
                       collectives=collectives,
                       analysed_on={k: r.host for k, r in sorted(by_rank_result.items())},
                       paths={k: r.path for k, r in sorted(by_rank_result.items())})
