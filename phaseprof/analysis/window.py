"""A step's time window and the host calls inside it: the definitions the breakdown and the timeline share.

- ``OPEN_START`` / ``OPEN_END``: the bounds of a step window that is open on that side (inferred steps: the
  first starts "whenever", a whole-trace step never ends). ``is_open_*`` test for them.
- ``step_bounds``: the ``[start, end)`` a step's wall time is measured over.
- ``HostCalls``: every runtime/driver call's kind (launch, sync, malloc, free, other), as masks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np
import pandas as pd

from phaseprof.defaults import DEVICE_FREE_APIS, DEVICE_MALLOC_APIS, LAUNCH_APIS, SYNC_APIS

#: Host-ns bounds of an open window side. A quarter of int64's range, so differences never overflow.
OPEN_START: int = int(np.iinfo(np.int64).min // 4)
OPEN_END: int = int(np.iinfo(np.int64).max // 4)
_OPEN_LIMIT = 1 << 60  # any bound beyond this is a sentinel, never a real time (36 years of ns)


def is_open_start(ns: int) -> bool:
    return ns <= -_OPEN_LIMIT


def is_open_end(ns: int) -> bool:
    return ns >= _OPEN_LIMIT


def step_bounds(host_start_ns: int, host_end_ns: int, items: pd.DataFrame, rt_ts: np.ndarray) -> tuple[int, int]:
    """The step's ``[start, end)`` in trace ns: its host window, where open replaced by its work (the first
    work item's start or launch call, whichever is earlier), and extended to the end of its last work item
    (work launched in a step may run after the host moved on). ``items``: the step's work items (``ts_ns``,
    ``end_ns``, ``launch`` columns); ``rt_ts``: start ns of every runtime row."""
    return step_bounds_of(host_start_ns, host_end_ns, items["ts_ns"].to_numpy(), items["end_ns"].to_numpy(),
                          items["launch"].to_numpy(), rt_ts)


def step_bounds_of(host_start_ns: int, host_end_ns: int, ts: np.ndarray, end: np.ndarray, launch: np.ndarray,
                   rt_ts: np.ndarray) -> tuple[int, int]:
    """:func:`step_bounds` on the step's item columns as arrays (no DataFrame per step: 200k steps)."""
    first_launch = int(rt_ts[launch[launch >= 0]].min()) if (launch >= 0).any() else None
    lo = [x for x in (int(ts.min()) if ts.size else None, first_launch) if x is not None]
    start = host_start_ns if not is_open_start(host_start_ns) else (min(lo) if lo else 0)
    hi = [int(end.max())] if end.size else []
    if not is_open_end(host_end_ns):
        hi.append(host_end_ns)
    return int(start), int(max(hi) if hi else start)


class HostCallKind(StrEnum):
    """What a runtime/driver API call does (``defaults`` lists the API names of each kind)."""

    LAUNCH = "launch"  # puts work on a GPU queue (LAUNCH_APIS)
    SYNC = "sync"  # blocks until the GPU catches up (SYNC_APIS)
    MALLOC = "malloc"  # real device allocation (DEVICE_MALLOC_APIS)
    FREE = "free"  # real device free (DEVICE_FREE_APIS)
    OTHER = "other"


_APIS = ((LAUNCH_APIS, HostCallKind.LAUNCH), (SYNC_APIS, HostCallKind.SYNC),
         (DEVICE_MALLOC_APIS, HostCallKind.MALLOC), (DEVICE_FREE_APIS, HostCallKind.FREE))


@dataclass(frozen=True)
class HostCalls:
    """Per runtime row: one boolean mask per kind, and its kind (a ``HostCallKind`` value) where asked for: an
    object per row that the breakdown never reads (1.3M of them at 2.1 GB)."""

    is_launch: np.ndarray
    is_sync: np.ndarray
    is_malloc: np.ndarray
    is_free: np.ndarray
    ids: np.ndarray = field(repr=False)  # per row, the index of its API name
    name_kinds: np.ndarray = field(repr=False)  # per API name, its kind's value (object)

    @property
    def kind(self) -> np.ndarray:
        """Per row, its kind's value (object)."""
        return self.name_kinds[self.ids]

    @classmethod
    def of(cls, names: np.ndarray) -> HostCalls:
        """``names``: the API name of every runtime row (``trace.tables.labels(runtime["name"])``)."""
        # Each distinct name tested once (np.isin on strings compares every row with every API name: ~50 ms
        # on 100K calls), then the rows looked up by their name's code.
        codes, distinct = pd.factorize(np.asarray(names, dtype=object), use_na_sentinel=False)
        return cls.of_ids(codes, distinct)

    @classmethod
    def of_ids(cls, ids: np.ndarray, names: np.ndarray) -> HostCalls:
        """:meth:`of` of ``names[ids]``: each row given as the index of its API name in ``names`` (a categorical's
        codes, say: no name per row is built)."""
        per_name = {k: np.asarray([d in apis for d in names], dtype=bool) for apis, k in _APIS}
        kinds = np.full(len(names), HostCallKind.OTHER.value, dtype=object)
        for k, m in per_name.items():
            kinds[m] = k.value
        if len(ids) == 0:
            empty = np.zeros(0, dtype=bool)
            return cls(is_launch=empty, is_sync=empty, is_malloc=empty, is_free=empty,
                       ids=np.zeros(0, dtype=np.intp), name_kinds=kinds)
        masks = {k: m[ids] for k, m in per_name.items()}
        return cls(is_launch=masks[HostCallKind.LAUNCH], is_sync=masks[HostCallKind.SYNC],
                   is_malloc=masks[HostCallKind.MALLOC], is_free=masks[HostCallKind.FREE], ids=ids, name_kinds=kinds)


def step_bounds_all(host_start: np.ndarray, host_end: np.ndarray, ts_min: np.ndarray, end_max: np.ndarray,
                    has_items: np.ndarray, first_launch: np.ndarray, has_launch: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`step_bounds_of` of every step at once, from each step's earliest item start, latest item end and
    earliest launch call start (``has_*``: whether the step has any)."""
    big = np.iinfo(np.int64).max
    lo = np.minimum(np.where(has_items, ts_min, big), np.where(has_launch, first_launch, big))
    open_start = host_start <= -_OPEN_LIMIT
    start = np.where(open_start, np.where(has_items | has_launch, lo, 0), host_start)
    closed_end = host_end < _OPEN_LIMIT
    small = np.iinfo(np.int64).min
    hi = np.maximum(np.where(has_items, end_max, small), np.where(closed_end, host_end, small))
    return start, np.where(has_items | closed_end, hi, start)
