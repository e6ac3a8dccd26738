"""Dominance between two pareto points, the tests' reference for ``pareto.build.frontier_indices`` (which finds
the frontier in one sort and one pass, without comparing pairs)."""

from __future__ import annotations


def dominates(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """``a`` is at least as good as ``b`` on both axes and better on one."""
    return a[0] >= b[0] and a[1] >= b[1] and (a[0] > b[0] or a[1] > b[1])
