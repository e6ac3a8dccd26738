"""Checks of one entry of a TOML data file (classification rules, the GPU catalogue, measured ceilings): each
problem is raised through the caller's ``fail(problem)``, which names the file and the entry."""

from __future__ import annotations

import math
from typing import Any, Callable

from phaseprof.errors import PhaseprofError

Fail = Callable[[str], PhaseprofError]


def check_keys(table: Any, *, required: frozenset[str], allowed: frozenset[str], fail: Fail) -> None:  # noqa: ANN401
    """``table`` is a table with every required key and no unknown one; else ``fail(problem)`` is raised."""
    if not isinstance(table, dict):
        raise fail("must be a table")
    missing = sorted(required - set(table))
    if missing:
        raise fail(f"missing key {missing[0]!r}")
    extra = sorted(set(table) - allowed)
    if extra:
        raise fail(f"unknown key {extra[0]!r} (allowed: {', '.join(sorted(allowed))})")


def positive(v: Any, what: str, fail: Fail, *, optional: bool = False) -> float | None:  # noqa: ANN401
    """``v`` as a float when it is a finite number above 0 (None where ``optional`` and absent); else ``fail``."""
    if v is None and optional:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        raise fail(f"{what} must be a positive number, not {v!r}")
    return float(v)
