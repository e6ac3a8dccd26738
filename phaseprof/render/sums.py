"""Parts printed beside their total add up on paper (every printed total equals the sum of its printed
parts): each part rounded to the printed digits, then the rounding leftover handed out by largest remainder
(Hamilton's method), so no part moves by more than one unit of its last digit."""

from __future__ import annotations

import math
from collections.abc import Sequence


def fit_sum(parts: Sequence[float], total: float, *, ndigits: int, tolerance: float = 0.005) -> list[float]:
    """``parts`` rounded to ``ndigits`` so that they sum to ``total`` rounded the same way. Only when the parts
    do add up to the total (within ``tolerance`` of it, relative); otherwise each part is rounded on its own:
    a table whose rows are not a partition is not forced into one."""
    scale = 10 ** ndigits
    if not parts or abs(sum(parts) - total) > tolerance * max(abs(total), 1e-12):
        return [round(p, ndigits) for p in parts]
    units = [p * scale for p in parts]
    floors = [math.floor(u) for u in units]
    left = round(total * scale) - sum(floors)
    order = sorted(range(len(parts)), key=lambda i: (floors[i] - units[i], i))  # largest remainder first
    for i in order[:max(left, 0)]:
        floors[i] += 1
    return [f / scale for f in floors]
