"""One rank file -> what the cross-rank report needs. A module-level function, so worker processes and Ray tasks
can run it; its result is small (the breakdown plus interval arrays), never the trace itself."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from phaseprof.analysis import intervals as iv
from phaseprof.analysis.pipeline import AnalysedTrace, AnalysisConfig, analyze
from phaseprof.trace.readers import Reader
from phaseprof.analysis.results import Breakdown
from phaseprof.classify.buckets import Bucket
from phaseprof.defaults import LAUNCH_APIS
from phaseprof.scale.families import collective_family, row_roles
from phaseprof.scale.run_parallel import declared_expert_parallel
from phaseprof.trace.tables import labels


@dataclass(frozen=True)
class RankCollectives:
    """One rank's collective kernels and the host/GPU context needed to explain late arrivals.

    All times are ns on the trace's clock (Kineto puts GPU activity on the host clock). Arrays of one length:
    ``family`` (see collective_families.toml), ``step`` (-1: outside every step), ``start_ns``, ``end_ns``,
    ordered by start. ``compute_*``: union of the rank's non-communication GPU activity; ``launch_*``: union of
    its host launch-API calls. Both unions are sorted and disjoint.

    Expert parallelism: ``moe_before_us`` / ``moe_after_us`` per collective = MoE-bucket kernel time (union) from
    the previous collective's end to this one's start / from this one's end to the next one's start (its place
    around the experts); ``moe_us_by_step`` = the breakdown's MoE bucket per step (kernel view);
    ``expert_parallel`` = what the run's record says (None: no record).

    :attr:`launch_hidden_ns` and :attr:`ep_roles` are derived on first use and kept; :func:`rank_result` derives
    them where the rank is analysed (a worker), so they travel with the result (pickled with it) and the parent,
    which matches all ranks after the last worker ends, only reads them (0.25 of its 0.33 s for 16
    ranks of 157 MB).
    """

    family: np.ndarray
    step: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    compute_start_ns: np.ndarray
    compute_end_ns: np.ndarray
    launch_start_ns: np.ndarray
    launch_end_ns: np.ndarray
    moe_before_us: np.ndarray
    moe_after_us: np.ndarray
    moe_us_by_step: dict[int, float]
    expert_parallel: bool | None = None

    @cached_property
    def launch_hidden_ns(self) -> tuple[np.ndarray, np.ndarray]:
        """Its launch calls intersected with its compute (start, end ns; sorted, disjoint): launch time hidden
        behind GPU work, which does not explain a late arrival."""
        return iv.intersect(self.launch_start_ns, self.launch_end_ns, self.compute_start_ns, self.compute_end_ns)

    @cached_property
    def ep_roles(self) -> tuple[list[str | None], list[str | None]]:
        """Per collective: its expert-parallel role from its family and neighbours (or None), and the role the
        context rules would give the others (or None); see ``families.row_roles``."""
        # lists of floats, not a numpy scalar per read
        return row_roles(self.family.tolist(), self.moe_before_us.tolist(), self.moe_after_us.tolist())


@dataclass(frozen=True)
class RankResult:
    """A rank file analysed: where (host, process) and what came out."""

    path: str
    host: str
    pid: int
    breakdown: Breakdown
    collectives: RankCollectives


def analyze_rank(path: str | Path, rule_files: list[str] | None = None, reader: Reader = Reader.AUTO) -> RankResult:
    """Load and analyse one rank trace (streaming loader, bounded memory) and extract its collectives.
    ``reader``: which trace reader (``--reader``); the breakdown's ``tool.reader`` says which one read it."""
    return rank_result(analyze(path, config=AnalysisConfig.with_rules(rule_files, reader=reader)))


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
    start, end = ts[comm][order].astype(np.int64), te[comm][order].astype(np.int64)
    moe = (items["kernel_bucket"] == Bucket.MOE).to_numpy()
    before, after = _moe_around(start, end, ts[moe], te[moe], int(ts.min()) if ts.size else 0,
                                int(te.max()) if te.size else 0)
    col = RankCollectives(
        family=np.asarray([collective_family(str(n)) for n in names], dtype=object),
        step=items["step"].to_numpy()[comm][order].astype(np.int64),
        start_ns=start, end_ns=end,
        compute_start_ns=cs, compute_end_ns=ce, launch_start_ns=ls, launch_end_ns=le,
        moe_before_us=before, moe_after_us=after,
        moe_us_by_step={s.index: s.kernel_view_us.get(Bucket.MOE, 0.0) for s in at.breakdown.steps},
        expert_parallel=declared_expert_parallel(at.path) if at.path and Path(at.path).is_file() else None)
    col.launch_hidden_ns, col.ep_roles  # noqa: B018 - derived here, in the worker (see RankCollectives)
    return RankResult(path=str(at.path), host=socket.gethostname(), pid=os.getpid(), breakdown=at.breakdown,
                      collectives=col)


def _moe_around(start: np.ndarray, end: np.ndarray, moe_s: np.ndarray, moe_e: np.ndarray, first_ns: int,
                last_ns: int) -> tuple[np.ndarray, np.ndarray]:
    """MoE kernel time (us, union) between each collective and its neighbours (see RankCollectives)."""
    if start.size == 0:
        return np.zeros(0), np.zeros(0)
    prev_end = np.concatenate([[first_ns], end[:-1]])
    next_start = np.concatenate([start[1:], [last_ns]])
    # Collectives on another stream may overlap their neighbours: an empty window then, not a negative one.
    before = iv.overlap_with_union(prev_end, np.maximum(start, prev_end), moe_s, moe_e)
    after = iv.overlap_with_union(end, np.maximum(next_start, end), moe_s, moe_e)
    return before.astype(np.float64) * 1e-3, after.astype(np.float64) * 1e-3
