"""Grouped reductions of item columns that give exactly what the pandas expressions they stand for give, faster:
shared by the breakdown (``analysis.breakdown``) and the attribution summary (``analysis.attribution``)."""

from __future__ import annotations

from collections.abc import Collection

import numpy as np
import pandas as pd


def group_sums(values: np.ndarray, codes: np.ndarray, n: int) -> np.ndarray:
    """Per group ``0 .. n - 1`` (``codes``, one per value; -1: in none), the sum of its values as
    ``pd.Series(values).groupby(codes).sum()`` makes it (pandas' compensated sum over the group's rows in row
    order), 0.0 for a group without rows. The codes go to pandas as a categorical, which it groups by as they are:
    an integer key is hashed into groups first, half the time of such a sum."""
    key = pd.Categorical.from_codes(codes, dtype=pd.CategoricalDtype(pd.RangeIndex(n)))
    return pd.Series(values, copy=False).groupby(key, observed=False).sum().to_numpy()


def rows_in_steps(step: np.ndarray, steps: Collection[int]) -> np.ndarray:
    """``pd.Series(step).isin(steps).to_numpy()`` for step numbers (-1: in none; ``steps``: 0 or more): a lookup in
    a table of the steps instead of a hash of every row."""
    if step.size == 0:
        return np.zeros(0, dtype=bool)
    wanted = np.fromiter(steps, dtype=np.int64, count=len(steps))
    top = max(int(step.max()), int(wanted.max()) if wanted.size else 0)
    table = np.zeros(top + 2, dtype=bool)  # the last slot: what step -1 reads (negative indices from the end)
    table[wanted] = True
    if int(step.min()) < -1:  # not a step number: what isin says of it (False), not the table's wrap-around
        return table[np.maximum(step, -1)]
    return table[step]
