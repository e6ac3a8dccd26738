"""Assign buckets to kernels (kernel view) and to the ops that launched them (module view).

Lookup order, for both views: the rules in order (user files first, then ``rules/default.toml``); the
first rule with a pattern found in the name wins. Kernel view falls back to ``Bucket.UNKNOWN``; module
view gives None for an op no rule names, and a stack with no named op falls back to the kernel view.
Vectorised: each unique name is classified once, then mapped back onto the rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import pandas as pd

from phaseprof.classify.buckets import Bucket
from phaseprof.classify.rules import Rule, RuleSet

View = Literal["kernel", "module"]


def first_match(name: str, rules: Sequence[Rule]) -> tuple[int, Rule] | None:
    """(index, rule) of the first rule in ``rules`` that matches ``name``, or None."""
    for index, rule in enumerate(rules):
        if rule.match(name):
            return index, rule
    return None


def _lookup(name: str, rules: RuleSet, view: View) -> Bucket | None:
    key = (view, name)
    memo = rules._memo
    if key not in memo:
        hit = rules.first_by_set(name, view)  # first_match's rule from one RE2 set pass, where it finds one
        if hit is None and rules.may_match(name, view):  # none found (or RE2 gave up): the rules one by one
            found = first_match(name, rules.kernel if view == "kernel" else rules.module)
            hit = found[1] if found else None
        memo[key] = hit.bucket if hit is not None else None
    return memo[key]


def kernel_bucket(name: str, rules: RuleSet) -> Bucket:
    """Kernel-view bucket of one kernel (or CPU op) name; ``UNKNOWN`` when no rule matches."""
    return _lookup(name, rules, "kernel") or Bucket.UNKNOWN


def classify_kernels(names: pd.Series | Sequence[str], rules: RuleSet) -> np.ndarray:
    """Kernel-view bucket of every name, as an object array of ``Bucket`` (missing names: ``UNKNOWN``).

    Memcpy/memset activities ("Memcpy HtoD (Pinned -> Device)", "Memset (Device)", ROCm copy kernels)
    land in ``MEMORY`` through the default rules like any other name.
    """
    values = names.to_numpy(dtype=object) if isinstance(names, pd.Series) else np.asarray(names, dtype=object)
    codes, uniques = pd.factorize(values, use_na_sentinel=True)
    # One extra slot at the end: code -1 (a missing name) indexes it.
    table = np.array([kernel_bucket(str(u), rules) for u in uniques] + [Bucket.UNKNOWN], dtype=object)
    return table[codes]


def module_bucket_of_op(name: str, rules: RuleSet) -> Bucket | None:
    """Module-view bucket named by one CPU op / annotation, or None if no module rule matches (cached)."""
    return _lookup(name, rules, "module")
