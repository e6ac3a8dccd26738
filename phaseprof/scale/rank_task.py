"""One rank file -> what the cross-rank report needs. A module-level function, so worker processes and Ray tasks
can run it; its result is small (the breakdown plus interval arrays), never the trace itself."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from phaseprof.analysis import intervals as iv
from phaseprof.analysis.pipeline import AnalysedTrace, AnalysisConfig, analyze
from phaseprof.analysis.results import Breakdown
from phaseprof.classify.buckets import Bucket
from phaseprof.defaults import LAUNCH_APIS
from phaseprof.scale.families import collective_family
from phaseprof.trace.tables import labels



@dataclass(frozen=True)
class RankCollectives:
    """One rank's collective kernels and the host/GPU context needed to explain late arrivals.

    All times are ns on the trace's clock (Kineto puts GPU activity on the host clock). Arrays of one length:
    ``family`` (see collective_families.toml), ``step`` (-1: outside every step), ``start_ns``, ``end_ns``,
    ordered by start. ``compute_*``: union of the rank's non-communication GPU activity; ``launch_*``: union of
    its host launch-API calls. Both unions are sorted and disjoint.
    """

    family: np.ndarray
    step: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    compute_start_ns: np.ndarray
    compute_end_ns: np.ndarray
    launch_start_ns: np.ndarray
    launch_end_ns: np.ndarray


@dataclass(frozen=True)
class RankResult:
    """A rank file analysed: where (host, process) and what came out."""

    path: str
    host: str
    pid: int
    breakdown: Breakdown
    collectives: RankCollectives


def analyze_rank(path: str | Path, rule_files: list[str] | None = None) -> RankResult:
    """Load and analyse one rank trace (streaming loader, bounded memory) and extract its collectives."""
    return rank_result(analyze(path, config=AnalysisConfig.with_rules(rule_files)))


def rank_result(at: AnalysedTrace) -> RankResult:
    """The cross-rank facts of an analysed trace: its breakdown and its collective instances."""
    items = at.prepared.items
    comm = (items["kernel_bucket"] == Bucket.COMMUNICATION).to_numpy()
    ts, te = items["ts_ns"].to_numpy(), items["end_ns"].to_numpy()
    order = np.argsort(ts[comm], kind="stable")
    names = labels(items["name"])[comm][order]
    cs, ce = iv.union(ts[~comm], te[~comm])
    rt = at.tables.runtime
    is_launch = np.isin(labels(rt["name"]), list(LAUNCH_APIS))
    ls, le = iv.union(rt["ts_ns"].to_numpy()[is_launch], rt["end_ns"].to_numpy()[is_launch])
    col = RankCollectives(
        family=np.asarray([collective_family(str(n)) for n in names], dtype=object),
        step=items["step"].to_numpy()[comm][order].astype(np.int64),
        start_ns=ts[comm][order].astype(np.int64), end_ns=te[comm][order].astype(np.int64),
        compute_start_ns=cs, compute_end_ns=ce, launch_start_ns=ls, launch_end_ns=le)
    return RankResult(path=str(at.path), host=socket.gethostname(), pid=os.getpid(), breakdown=at.breakdown,
                      collectives=col)
