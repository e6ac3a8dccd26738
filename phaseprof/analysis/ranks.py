"""Several rank traces of one distributed run (vLLM's profiler writes one file per TP/EP rank).

``analyze_ranks`` analyses each rank with the same pipeline as a single trace, checks that the files belong
together (one run: same world size, distinct ranks, none missing, matching step counts) and summarises
load imbalance: for every step, the slowest rank and by how much it trails the fastest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from phaseprof.analysis.breakdown import analyze_tables
from phaseprof.analysis.results import Breakdown
from phaseprof.classify.rules import load_rules
from phaseprof.errors import PhaseprofError
from phaseprof.trace.tables import load_tables
from phaseprof.analysis.invariants import checked

TRACE_SUFFIXES = (".json", ".json.gz")


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


def find_trace_files(directory: Path) -> list[Path]:
    """Trace files directly inside ``directory`` (``*.json``, ``*.json.gz``), sorted by name."""
    if not directory.is_dir():
        raise PhaseprofError("not a directory", path=directory)
    files = sorted(p for p in directory.iterdir() if p.is_file() and p.name.endswith(TRACE_SUFFIXES)
                   and not p.name.endswith(("breakdown.json", "run.json", "sweep.json")))
    if not files:
        raise PhaseprofError("no trace files (*.json, *.json.gz) in this directory", path=directory)
    return files


def _rank_of(bd: Breakdown, path: Path) -> tuple[int, int]:
    dist = bd.trace.distributed or {}
    rank, world = dist.get("rank"), dist.get("world_size")
    if rank is None or world is None:
        raise PhaseprofError("trace has no distributedInfo rank/world_size: cannot place it among ranks", path=path)
    return int(rank), int(world)


def analyze_ranks(paths: list[Path], *, rules: list[Path] | None = None) -> RankSummary:
    """Analyse every rank trace and compare them. Raises on mixed runs; warns on partial evidence."""
    ruleset = load_rules(rules)
    by_rank: dict[int, Breakdown] = {}
    worlds: dict[int, list[Path]] = {}
    for p in paths:
        bd = checked(analyze_tables(load_tables(p), ruleset))
        rank, world = _rank_of(bd, p)
        worlds.setdefault(world, []).append(p)
        if rank in by_rank:
            raise PhaseprofError(f"rank {rank} appears twice ({Path(by_rank[rank].trace.path).name} and {p.name}): "
                                 "traces from different runs are mixed in one directory", path=p.parent)
        by_rank[rank] = bd
    if len(worlds) > 1:
        desc = "; ".join(f"world_size {w}: {', '.join(x.name for x in ps)}" for w, ps in worlds.items())
        raise PhaseprofError(f"traces from runs of different sizes are mixed ({desc})", path=paths[0].parent)
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
        comm = {r: bd.steps[k].kernel_view_us.get("communication", 0.0) for r, bd in sorted(by_rank.items())}
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
    return RankSummary(world_size=world, ranks=dict(sorted(by_rank.items())), steps=steps,
                       communication_share_pct=share, communication_overlap_pct=overlap, warnings=warnings)
