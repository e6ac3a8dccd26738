"""Every intermediate table's columns, declared once: name, dtype, unit and meaning (as Perfetto's
``tables/*.py`` declare theirs). ``tests/test_columns.py`` checks the tables and work items of every
committed trace against these declarations.

Tables (``trace.tables.EventTables`` holds the first five; ``analysis.items`` builds the last):

- ``GPU``: kernels, memcpys and memsets; ``RUNTIME``: CUDA/HIP runtime and driver calls on host threads;
  ``OPS``: CPU ops and user annotations; ``GPU_ANNOTATIONS``: GPU-timeline projections of annotations.
  All four share ``EVENT_COLUMNS``.
- ``MEMORY``: allocator events (``[memory]`` instants).
- ``ITEMS``: work items inside steps, the things whose time is attributed to buckets (GPU activities, or CPU
  ops on CPU-only traces).

Times are integer ns since the trace's first event (``TraceMeta.origin_us``). Row numbers refer to rows of
another table (``-1`` = none); no code relies on a DataFrame's index.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import numpy as np
import pandas as pd

from phaseprof.classify.buckets import Bucket


class EventKind(StrEnum):
    """The ``kind`` of an event row (the categories of every ``kind`` column)."""

    KERNEL = "kernel"
    MEMCPY = "memcpy"
    MEMSET = "memset"
    RUNTIME = "runtime"
    DRIVER = "driver"
    CPU_OP = "cpu_op"
    USER_ANNOTATION = "user_annotation"
    GPU_USER_ANNOTATION = "gpu_user_annotation"
    MODULE = "module"  # an ``nn.Module: Class_N`` python_function scope (the ``modules`` table)


class Dtype(StrEnum):
    INT64 = "int64"
    FLOAT64 = "float64"
    CATEGORY = "category"  # pandas categorical of strings
    BUCKET = "bucket"  # categorical over the ``Bucket`` values (BUCKET_DTYPE)


@dataclass(frozen=True)
class Column:
    name: str
    dtype: Dtype
    unit: str  # "ns", "bytes", "row" (a row number in another table), "" (none)
    doc: str


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[Column, ...]
    doc: str

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def column(self, name: str) -> Column:
        return next(c for c in self.columns if c.name == name)


def _c(name: str, dtype: Dtype, unit: str, doc: str) -> Column:
    return Column(name, dtype, unit, doc)


I, F, C, B = Dtype.INT64, Dtype.FLOAT64, Dtype.CATEGORY, Dtype.BUCKET

EVENT_COLUMNS: tuple[Column, ...] = (
    _c("kind", C, "", "EventKind value"),
    _c("name", C, "", "event name: kernel, API call, op or annotation"),
    _c("pid", C, "", "process id as written in the trace (GPU rows: device)"),
    _c("tid", C, "", "thread id as written in the trace (GPU rows: stream)"),
    _c("ts_ns", I, "ns", "start"),
    _c("dur_ns", I, "ns", "duration (0 when the trace gives none)"),
    _c("end_ns", I, "ns", "ts_ns + dur_ns"),
    _c("correlation", I, "", "links a GPU activity to the runtime call that launched it; -1 = none"),
    _c("external_id", I, "", "links a runtime call to its CPU op; -1 = none"),
    _c("device", I, "", "GPU index; -1 = not given"),
    _c("stream", I, "", "GPU stream; -1 = not given"),
    _c("bytes", I, "bytes", "memcpy/memset size; 0 = not given"),
    _c("launched_kernel", C, "", "the kernel name a launch call carries in args.kernel (ROCm launch APIs); "
                                 "\"\" when absent"),
)
GPU = Table("gpu", EVENT_COLUMNS, "kernels, memcpys and memsets (kind kernel|memcpy|memset)")
RUNTIME = Table("runtime", EVENT_COLUMNS, "CUDA/HIP runtime and driver API calls on host threads")
OPS = Table("ops", EVENT_COLUMNS, "CPU ops and user annotations (record_function)")
GPU_ANNOTATIONS = Table("gpu_annotations", EVENT_COLUMNS, "GPU-timeline projections of annotations")
MEMORY = Table("memory", (
    _c("ts_ns", I, "ns", "time of the allocator event"),
    _c("pid", C, "", "process id"),
    _c("tid", C, "", "thread id"),
    _c("bytes", I, "bytes", "> 0 allocation, < 0 free"),
    _c("total_allocated", I, "bytes", "allocator total after the event; -1 = not given"),
    _c("device_type", I, "", "0 = CPU, else a GPU; -1 = not given"),
    _c("device_id", I, "", "device index; -1 = not given"),
), "allocator events ([memory] instants)")
ITEMS = Table("items", (
    _c("step", I, "row", "index of the step (StepDetection.steps) whose host window holds the launch"),
    _c("ts_ns", I, "ns", "start"),
    _c("end_ns", I, "ns", "end"),
    _c("name", C, "", "kernel / op name"),
    _c("kind", C, "", "EventKind value (kernel|memcpy|memset on GPU traces, cpu_op on CPU-only traces)"),
    _c("kernel_bucket", B, "", "kernel view: what it is, from its name"),
    _c("module_bucket", C, "", "module view: which model component it ran for (a Bucket value, or the class "
                               "name of a module no rule names); else its kernel bucket"),
    _c("launch", I, "row", "row in ``runtime`` of the call that launched it; -1 = none (always on CPU)"),
    _c("bytes", I, "bytes", "memcpy/memset size (0 for kernels and CPU ops)"),
    _c("stream", I, "", "GPU stream; -1 on CPU-only traces"),
    _c("row", I, "row", "its row in the source table: ``gpu`` on GPU traces, ``ops`` on CPU-only traces"),
    _c("share_ns", F, "ns", "its attributed time: exclusive part of GPU busy (stream overlaps split "
                            "equally) on GPU traces, self time on CPU-only traces; sums to busy time"),
    _c("attribution", C, "", "how its module view was found: op_stack | module_tree | graph_alignment | "
                             "structural | bracketed | kernel_name (analysis.attribution)"),
    _c("layer", I, "", "decoder layer index it ran in (nn.Module tree, graph alignment, layer plan or "
                       "bracketing); -1 = none"),
), "work items inside steps, with their buckets and time share (analysis.items)")

MODULES = Table("modules", EVENT_COLUMNS, "nn.Module: Class_N Python scopes (traces recorded with_stack)")

EVENT_TABLES: tuple[Table, ...] = (GPU, RUNTIME, OPS, GPU_ANNOTATIONS, MEMORY, MODULES)
#: dtype of the bucket columns: only ``Bucket`` values fit; categories in name order, so grouping by bucket
#: lists buckets as sorting their names would.
BUCKET_DTYPE = pd.CategoricalDtype(sorted(b.value for b in Bucket))


def buckets(values: np.ndarray) -> pd.Categorical:
    """A bucket column from ``Bucket`` values (raises on anything else)."""
    # Codes first, then the column: pandas deprecates (and 4.0 refuses) a Categorical built from values outside
    # its categories, and the error must name them.
    codes = BUCKET_DTYPE.categories.get_indexer(values)  # -1: missing or not a bucket
    unknown = (codes < 0) & ~pd.isna(values)
    if unknown.any():
        bad = sorted({str(v) for v in values[unknown]})
        raise ValueError(f"not buckets: {bad[:5]}")
    return pd.Categorical.from_codes(codes, dtype=BUCKET_DTYPE)
