"""Inline ``RankCollectives`` for the collective-matching tests (test_collectives.py, test_expert_parallel.py)."""

from __future__ import annotations

import numpy as np

from phaseprof.scale.rank_task import RankCollectives


def rank(colls, compute=(), launches=(), *, moe_before=None, moe_after=None, moe_by_step=None, ep=None):
    """colls: (family, step, start, end) in ns; compute/launches: (start, end); moe_*: us per collective."""
    a = lambda xs, i: np.asarray([x[i] for x in xs], dtype=np.int64)  # noqa: E731
    zeros = np.zeros(len(colls))
    return RankCollectives(
        family=np.asarray([c[0] for c in colls], dtype=object), step=a(colls, 1), start_ns=a(colls, 2),
        end_ns=a(colls, 3), compute_start_ns=a(compute, 0), compute_end_ns=a(compute, 1),
        launch_start_ns=a(launches, 0), launch_end_ns=a(launches, 1),
        moe_before_us=zeros if moe_before is None else np.asarray(moe_before, dtype=float),
        moe_after_us=zeros if moe_after is None else np.asarray(moe_after, dtype=float),
        moe_us_by_step=moe_by_step or {}, expert_parallel=ep)
