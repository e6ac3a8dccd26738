"""Turn decoded events into columnar tables (one pandas DataFrame per event family).

Timestamps become integer nanoseconds from the trace's first event (``ts_ns``), so nanosecond-resolution
traces keep their resolution (HTA rounds to whole microseconds by default and loses time on short kernels).
Legacy category names (``Kernel``, ``Runtime``, ``Operator``, ``Memcpy``, ``Memset``) map onto today's.

Events arrive chunk by chunk (:mod:`phaseprof.trace.stream`) or all at once (the whole-document fallback); either
way :class:`TableBuilder` keeps only the columns of the events used, as numpy arrays, with names, pids and tids as
integer codes into per-file tables (a kernel name seen 10,000 times is stored once), and drops the rest.
"""

from __future__ import annotations

import gc
import re
from collections import defaultdict
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import repeat
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from phaseprof.errors import PhaseprofError, TraceError
from phaseprof.records import RunRecord
from phaseprof.trace.limits import (DENSE_KEPT_EVENTS, MAX_KEPT_EVENTS, MIN_BYTES_PER_KEPT_EVENT, TraceValueError,
                                   check_metadata, check_times, int64_or_error)
from phaseprof.trace.load import decode_trace, read_trace_bytes
from phaseprof.trace.readers import ReadBy
from phaseprof.trace.schema import Args, Event, TraceDoc
from phaseprof.trace.stream import stream_trace

if TYPE_CHECKING:
    import pandas as pd

#: A filter on the events TableBuilder keeps: ``keep(family, events, ts_us)`` -> bool mask over ``events`` (the
#: complete events a family would keep, file order; ``family`` is one of FAMILIES, "modules" or "memory").
Keep = Callable[[str, Sequence[Event], np.ndarray], np.ndarray]

_KINDS = ("kernel", "memcpy", "memset", "runtime", "driver", "cpu_op", "user_annotation", "gpu_user_annotation",
          "module")
_K = {k: i for i, k in enumerate(_KINDS)}
# category -> (family, kind code into _KINDS)
_CATEGORIES: dict[str | None, tuple[str, int]] = {
    "kernel": ("gpu", _K["kernel"]), "Kernel": ("gpu", _K["kernel"]),
    "gpu_memcpy": ("gpu", _K["memcpy"]), "Memcpy": ("gpu", _K["memcpy"]),
    "gpu_memset": ("gpu", _K["memset"]), "Memset": ("gpu", _K["memset"]),
    "cuda_runtime": ("runtime", _K["runtime"]), "Runtime": ("runtime", _K["runtime"]),
    "cuda_driver": ("runtime", _K["driver"]),
    "cpu_op": ("ops", _K["cpu_op"]), "Operator": ("ops", _K["cpu_op"]),
    "user_annotation": ("ops", _K["user_annotation"]),
    "gpu_user_annotation": ("gpu_annotations", _K["gpu_user_annotation"]),
}
FAMILIES = ("gpu", "runtime", "ops", "gpu_annotations")
#: ``python_function`` events kept: only PyTorch's ``nn.Module: Class_N`` forward scopes (the module tree). Not in
#: FAMILIES: the trace origin and every other table stay as they were without them.
MODULE_PREFIX = "nn.Module: "
#: Categories of module scopes: the Python tracer's frames, and the scopes ``phaseprof capture --hierarchy hooks``
#: opens (``capture/inprocess/module_scopes.py``) as ``cpu_op`` (``user_annotation`` on torches without the fast scope).
#: Named ``nn.Module: …``, those go to ``modules`` and never to ``ops`` (they are structure, not work).
MODULE_SCOPE_CATEGORIES = ("python_function", "cpu_op", "user_annotation")
_MODULE_KIND = _KINDS.index("module")
# Routing tables of TableBuilder.add, indexed by a category code: one code per category above, then
# python_function, then _REST (everything else: flows, instants, metadata).
_CAT_LIST = [*_CATEGORIES, "python_function"]
_CAT_CODE: dict[str | None, int] = {c: i for i, c in enumerate(_CAT_LIST)}
_REST = len(_CAT_LIST)
_CODE_FAMILY = {f: np.array([_CATEGORIES.get(c, ("", 0))[0] == f for c in _CAT_LIST], dtype=bool)
                for f in FAMILIES}
_CODE_KIND = np.array([_CATEGORIES.get(c, ("", _MODULE_KIND))[1] for c in _CAT_LIST], dtype=np.int8)
_MODULE_SCOPE = np.array([c in MODULE_SCOPE_CATEGORIES for c in _CAT_LIST], dtype=bool)
_X, _I_OR_M = "X", frozenset(("i", "M"))
_EMPTY_ARGS = Args()
_NONE = type(None)
_INT_OR_NONE, _STR, _NONE_ONLY, _NONE_TYPE = {int, _NONE}, {str}, {None}, {_NONE}
_NAME, _PID, _TID, _TS, _DUR, _CAT, _PH = (attrgetter(f) for f in ("name", "pid", "tid", "ts", "dur", "cat", "ph"))
_EXTERNAL_ID, _LEGACY_ID = attrgetter("external_id"), attrgetter("external_id_legacy")
_KERNEL_ARG, _ARGS = attrgetter("kernel"), attrgetter("args")
_INT_ARGS = {"correlation": (attrgetter("correlation"), -1), "device": (attrgetter("device"), -1),
             "stream": (attrgetter("stream"), -1), "bytes": (attrgetter("bytes"), 0)}  # column: (getter, default)
#: The columns TableBuilder keeps per family, with their dtypes. The native scanner's ABI numbers them in this order:
#: its ``native/src/layout.rs`` is generated from this table (``python -m phaseprof.trace.native_layout``).
_FAMILY_COLUMNS = (("kind", np.int8), ("name", np.int32), ("pid", np.int32), ("tid", np.int32), ("ts", np.float64),
                   ("dur", np.float64), ("external_id", np.int64), ("launched_kernel", np.int32),
                   ("correlation", np.int64), ("device", np.int64), ("stream", np.int64), ("bytes", np.int64))


@dataclass(frozen=True)
class TraceMeta:
    """Facts about the trace file and the machine that recorded it."""

    path: str
    sha256: str
    decompressed_bytes: int
    event_count: int
    platform: str  # "cuda" | "rocm" | "cpu" (no GPU activity at all)
    gpu_name: str | None
    device_properties: list[dict[str, Any]]
    distributed: dict[str, Any]
    versions: dict[str, str]  # cuda/hip runtime+driver, cupti, vllm when known
    origin_us: float  # trace-clock time of ts_ns == 0, in the file's microseconds
    has_memory_events: bool
    process_names: dict[str, str] = field(default_factory=dict)
    capture: RunRecord | None = None  # what phaseprof capture embedded (its ``phaseprof`` key), if readable


@dataclass(frozen=True)
class EventTables:
    """All events phaseprof uses, as columns. Times in ns since ``meta.origin_us``; ``end_ns = ts_ns + dur_ns``.
    Every column (name, dtype, unit, meaning) is declared in ``phaseprof.columns`` (``EVENT_TABLES``).

    - ``gpu``: kernels, memcpys, memsets (``kind``), with ``device``, ``stream``, ``correlation``, ``bytes``.
    - ``runtime``: CUDA/HIP runtime and driver API calls on host threads (``cudaLaunchKernel``, ``cudaGraphLaunch``, ...).
    - ``ops``: CPU ops and user annotations (``record_function``), with ``external_id``.
    - ``gpu_annotations``: GPU-timeline projections of annotations.
    - ``memory``: allocator events (``[memory]``): ``bytes`` > 0 allocation, < 0 free.
    - ``modules``: ``nn.Module: Class_N`` scopes: Python-tracer frames (traces recorded ``with_stack``) or the
      scopes of ``phaseprof capture --hierarchy hooks``; empty otherwise.

    Every family but ``memory`` also has ``launched_kernel``: the ``args.kernel`` name a launch call carries (ROCm
    launch APIs; "" when absent), which names the kernels a CUDA-graph capture records without running them.

    An integer column holding one value throughout (e.g. ``bytes`` of CPU ops) is that value broadcast over the
    rows: a read-only view, as ``to_numpy()`` of any column is under pandas' copy-on-write; copy to write.
    """

    meta: TraceMeta
    gpu: pd.DataFrame
    runtime: pd.DataFrame
    ops: pd.DataFrame
    gpu_annotations: pd.DataFrame
    memory: pd.DataFrame
    modules: pd.DataFrame = field(default_factory=lambda: _frame({}))
    read_by: ReadBy = ReadBy("python", "built from decoded events")  # ``trace.read.load_tables`` sets it


_INT_TEXT = re.compile(r"-?[0-9]+")  # ASCII only: int() would also take Unicode digits, "_" and spaces



def _embedded_capture(doc: dict[str, Any] | None, path: str) -> RunRecord | None:
    """The capture facts phaseprof embedded in the trace, typed; None without them. The facts only label the
    analysis, so a key of the wrong type drops them rather than the trace."""
    if not doc:
        return None
    try:
        return RunRecord.from_embedded(doc, source=path)
    except PhaseprofError:
        return None

def _to_int(v: object, default: int, what: str) -> int:
    """An int64 from a trace value: ints and whole floats as they are, ASCII integer strings parsed; other
    strings (legacy tids look like "stream 7") -> ``default``. Beyond int64: TraceValueError."""
    if v is None:
        return default
    if isinstance(v, str):  # ROCm writes some numbers as strings
        if not _INT_TEXT.fullmatch(v):
            return default
        if len(v) > 20:  # int() refuses over 4,300 digits; int64 has 19
            raise TraceValueError(f"{what} value {v[:20]}... ({len(v)} digits) is beyond the 64-bit range")
        v = int(v)
    int64_or_error(v, what=what)
    return int(v)  # type: ignore[call-overload]


def _int_or(values: Sequence[object], default: int = -1, what: str = "integer") -> np.ndarray:
    """int64 column: ints as they are, None -> ``default``, anything else through :func:`_to_int`."""
    kinds = set(map(type, values))  # one C-level pass; almost always {int}, {NoneType} or both
    if kinds <= _INT_OR_NONE:
        if _NONE in kinds:
            if len(kinds) == 1:
                return np.full(len(values), default, dtype=np.int64)
            values = [default if v is None else v for v in values]
        try:  # fromiter: ~1.5x faster than np.array on a list of ints (ints only here: it would parse strings)
            return np.fromiter(values, dtype=np.int64, count=len(values))
        except OverflowError:  # some int beyond int64: name it
            pass
    return np.array([_to_int(v, default, what) for v in values], dtype=np.int64)


def _durations(values: list[object]) -> np.ndarray:
    """float64 column, no duration -> 0 (numpy makes None NaN; JSON has no NaN, so a NaN was a None)."""
    a = np.array(values, dtype=np.float64)
    a[np.isnan(a)] = 0.0
    return a


def _floats(evs: Sequence[Event], get: Callable[[Event], object]) -> np.ndarray:
    """``np.array(list(map(get, evs)), dtype=np.float64)`` (None -> NaN), ~2x faster: no list, no type
    discovery. Anything fromiter does not take (a number beyond float64) goes the np.array way, error included."""
    try:
        return np.fromiter(map(get, evs), dtype=np.float64, count=len(evs))
    except (TypeError, ValueError, OverflowError):
        return np.array(list(map(get, evs)), dtype=np.float64)


class _Codes:
    """Distinct values -> small integer codes, in order of first appearance; one table per file."""

    def __init__(self) -> None:
        self._table: dict[object, int] = {}

    def codes(self, values: Sequence[object]) -> np.ndarray:
        table = self._table
        try:  # after the first chunks, every value is almost always known already: one pass
            return np.fromiter(map(table.__getitem__, values), dtype=np.int32, count=len(values))
        except KeyError:
            pass
        for v in dict.fromkeys(values):  # the distinct values, first appearance first
            if v not in table:
                table[v] = len(table)
        return np.fromiter(map(table.__getitem__, values), dtype=np.int32, count=len(values))

    def code(self, value: object) -> int:
        return self._table.setdefault(value, len(self._table))

    def labels(self) -> list[str]:
        return [str(v) for v in self._table]  # pid 7 and pid "7" get two codes but one label


#: Faster passes of :func:`_categorical` (the native builder's): ``used(codes, n_labels)`` -> the codes used, sorted;
#: ``recode(remap, codes)`` -> ``remap[codes]``; either may return None (then numpy does it).
CodePasses = tuple[Callable[[np.ndarray, int], "np.ndarray | None"],
                   Callable[[np.ndarray, np.ndarray], "np.ndarray | None"]]


def _categorical(codes: np.ndarray, labels: list[str] | tuple[str, ...],
                 passes: CodePasses | None = None) -> pd.Categorical:
    """What ``pd.Categorical([labels[c] for c in codes])`` gives (sorted categories, only those used), without
    building a string per row. ``codes``: non-negative, each below ``len(labels)``.

    Why not ``np.unique(codes)`` and ``from_codes(remap[codes], ...)``: at 7.4 M rows that sorted every column,
    gathered int64 codes that pandas then validated (two passes) and cast to the dtype it keeps (a third); here a
    count marks the codes used and the gather writes that dtype directly."""
    import pandas as pd  # here, not at the top: the read runs before pandas is imported (``trace.read``)

    if codes.size == 0:
        return pd.Categorical([])
    constant = codes.strides == (0,)  # a constant run broadcast (``_Growing.array``): one value
    used = codes[:1] if constant else passes[0](codes, len(labels)) if passes is not None else None
    if used is None:
        used = np.flatnonzero(np.bincount(codes))
    cats, inverse = np.unique(np.array([labels[i] for i in used], dtype=object), return_inverse=True)
    # The codes dtype pandas keeps (``coerce_indexer_dtype``): the smallest signed integer that holds them.
    width = next(t for t in (np.int8, np.int16, np.int32, np.int64) if cats.size < np.iinfo(t).max)
    remap = np.zeros(int(used[-1]) + 1, dtype=width)
    remap[used] = inverse
    out = np.full(codes.size, remap[used[0]], dtype=width) if constant else \
        passes[1](remap, codes) if passes is not None else None
    if out is None:
        out = remap[codes]
    return pd.Categorical.from_codes(out, categories=cats, validate=False)  # valid: 0..len(cats)-1


def _pick(seq: Sequence[Event], idx: np.ndarray) -> Sequence[Event]:
    """``seq``'s items at ``idx`` (ascending), in one C-level call."""
    if idx.size == len(seq):
        return seq
    if idx.size == 1:
        return [seq[int(idx[0])]]
    return itemgetter(*idx.tolist())(seq)


def _memory_ts(evs: Sequence[Event]) -> np.ndarray:
    return np.array([e.ts or 0.0 for e in evs], dtype=np.float64)


def durations(evs: Sequence[Event]) -> np.ndarray:
    """``dur`` of each event in µs as float64 (absent: 0)."""
    return _durations(list(map(_DUR, evs)))


def correlations(evs: Sequence[Event]) -> np.ndarray:
    """``args.correlation`` of each event as int64 (absent or not an integer: -1)."""
    return _int_or([e.args.correlation if e.args is not None else None for e in evs], what="args.correlation")


def _is_module_name(name: object) -> bool:
    return type(name) is str and name.startswith(MODULE_PREFIX)


class _Growing:
    """One column appended to chunk by chunk: a single numpy array grown by doubling, or, while every value
    appended is one and the same integer, only that value and a count (a constant run).

    Why not a list of per-chunk arrays concatenated at the end: those few-KB arrays live on the malloc heap and,
    once concatenated and freed, leave it fragmented (measured on a 154 MB trace: +70 MB of RSS never given
    back). A big array is mapped on its own; capacity not yet written is never touched, so costs no memory.

    Why constant runs: most argument columns are absent on most events (``correlation``, ``device``, ``stream``
    and ``bytes`` of every CPU op: -1, -1, -1, 0); as arrays they were a third of the loader's memory, in each
    process of a split read, and of the tables. Integers only: float equality would merge 0.0 and -0.0."""

    __slots__ = ("data", "size", "const")

    def __init__(self) -> None:
        self.data: np.ndarray | None = None
        self.size = 0
        self.const: np.ndarray | None = None  # the run's value, shape (1,), while ``data`` is None and size > 0

    @classmethod
    def of(cls, values: np.ndarray) -> "_Growing":
        """A column holding ``values`` (a fresh array it takes over), as appending them to an empty one gives."""
        g = cls()
        if not g._extend_run(values[:1], len(values), values):
            g.data, g.size = values, len(values)
        return g

    def append(self, values: np.ndarray) -> None:
        if self._extend_run(values[:1], len(values), values):
            return
        n = self.size + len(values)
        if self.data is None or n > len(self.data):
            self._grow(n, values.dtype)
        self.data[self.size:n] = values
        self.size = n

    def append_run(self, value: np.ndarray, count: int) -> None:
        """Append ``count`` rows of ``value`` (shape (1,)): what ``append(np.repeat(value, count))`` does."""
        if self._extend_run(value, count, None):
            return
        n = self.size + count
        if self.data is None or n > len(self.data):
            self._grow(n, value.dtype)
        self.data[self.size:n] = value[0]
        self.size = n

    def _extend_run(self, first: np.ndarray, count: int, values: np.ndarray | None) -> bool:
        """Count ``count`` more rows of ``first[0]`` into the constant run, if there is one to extend (or none
        yet) and ``values`` (those rows; None: all ``first[0]``) hold nothing else."""
        if self.data is not None or first.dtype.kind not in "iu":
            return False
        if not count:  # nothing to add: a run stays one (no run yet: the array path, as before runs)
            return self.const is not None
        if self.const is not None and (self.const.dtype != first.dtype or self.const[0] != first[0]):
            return False
        if values is not None and not (values == first[0]).all():
            return False
        if self.const is None:
            self.const = first.copy()  # a copy: the chunk's array is not kept alive
        self.size += count
        return True

    def _grow(self, n: int, dtype: np.dtype) -> None:
        grown = np.empty(max(n, 2 * self.size, 1 << 14), dtype=dtype)
        if self.data is not None:
            grown[:self.size] = self.data[:self.size]
        elif self.const is not None:  # the run ends: its rows written out
            grown[:self.size] = self.const[0]
            self.const = None
        self.data = grown

    def array(self, dtype: type) -> np.ndarray:
        """The column; a constant run of at least :data:`_CONSTANT_MIN_ROWS` rows as its value broadcast over the
        rows: a read-only zero-stride view (pandas, copy-on-write, never writes into a column in place, and
        ``to_numpy()`` views of columns are read-only anyway)."""
        if self.data is not None:
            return self.data[:self.size]
        if self.const is None:
            return np.zeros(0, dtype=dtype)
        if self.size < _CONSTANT_MIN_ROWS:
            return np.full(self.size, self.const[0], dtype=self.const.dtype)
        return np.broadcast_to(self.const.reshape(()), (self.size,))

    def exported(self) -> np.ndarray | tuple[np.ndarray, int]:
        """What :meth:`extend` takes: the rows as an array, or a constant run as (value, count)."""
        if self.data is None and self.const is not None:
            return self.const, self.size
        return self.array(np.int64)

    def extend(self, rows: np.ndarray | tuple[np.ndarray, int], remap: np.ndarray | None = None) -> None:
        """Append :meth:`exported` ``rows`` of another column, each value ``v`` as ``remap[v]`` if given."""
        if isinstance(rows, tuple):
            value, count = rows
            self.append_run(remap[value] if remap is not None else value, count)
        else:
            self.append(remap[rows] if remap is not None else rows)


#: Constant runs at least this long are kept as one value broadcast over the rows (shorter: written out).
_CONSTANT_MIN_ROWS = 1 << 12


class TableBuilder:
    """Collects, chunk by chunk, the columns of the events phaseprof uses; :meth:`finish` makes the tables."""

    def __init__(self, keep: Keep | None = None) -> None:
        """``keep``: a further filter on the events each family would keep (see :data:`Keep`); None keeps all."""
        self._keep = keep
        self._names, self._ids = _Codes(), _Codes()
        self._cols: dict[str, dict[str, _Growing]] = {
            f: defaultdict(_Growing) for f in [*FAMILIES, "modules", "memory"]}
        self._process_names: dict[str, str] = {}
        self.event_count = 0
        self._kept = 0  # events kept so far (bounded by MAX_KEPT_EVENTS)

    def add(self, events: list[Event]) -> None:
        """Keep what is used of ``events`` (file order) as columns; the structs can be freed afterwards.

        Why no loop over events here: each per-event Python statement costs ~50 ns x millions of events. The
        routing is done by C-level ``map`` passes (category code, then ``ph``/``ts`` on the candidates only) and
        numpy masks; only the events kept are touched again, by :meth:`_add_family`.
        """
        n = len(events)
        self.event_count += n
        if not n:
            return
        code = np.fromiter(map(_CAT_CODE.get, map(_CAT, events), repeat(_REST)), dtype=np.int8, count=n)
        routed = np.flatnonzero(code < _REST)  # a family category or python_function: complete events only
        kept: dict[str, tuple[list[Event], np.ndarray, np.ndarray]] = {}
        if routed.size:
            evs = _pick(events, routed)
            ts = _floats(evs, _TS)  # None -> NaN
            ok = ~np.isnan(ts) & np.fromiter(map(_X.__eq__, map(_PH, evs)), dtype=bool, count=len(evs))
            c = code[routed]
            module = np.zeros(len(evs), dtype=bool)
            scope = np.flatnonzero(ok & _MODULE_SCOPE[c])
            if scope.size:  # PyTorch's nn.Module scopes (the module tree), by name
                names = list(map(_NAME, _pick(evs, scope)))
                # Names repeat (every aten::mm is a cpu_op): test each distinct one, then look the rows up.
                modules = {n for n in set(names) if _is_module_name(n)}
                if modules:
                    module[scope] = np.fromiter(map(modules.__contains__, names), dtype=bool, count=len(names))
            for f in [*FAMILIES, "modules"]:
                sel = np.flatnonzero(module if f == "modules" else ok & ~module & _CODE_FAMILY[f][c])
                if sel.size and self._keep is not None:
                    sel = sel[self._keep(f, _pick(evs, sel), ts[sel])]
                if sel.size:
                    kind = np.full(sel.size, _MODULE_KIND, dtype=np.int8) if f == "modules" else _CODE_KIND[c[sel]]
                    kept[f] = (_pick(evs, sel), kind, ts[sel])
            del evs
        memory: list[Event] = []
        rest = np.flatnonzero(code == _REST)
        if rest.size:  # allocator instants and process names: few, but among all uncategorised events (flows)
            others = _pick(events, rest)
            phs = list(map(_PH, others))
            for i in np.flatnonzero(np.fromiter(map(_I_OR_M.__contains__, phs), dtype=bool, count=len(phs))):
                e = others[i]
                if e.ph == "i" and e.name == "[memory]":
                    memory.append(e)
                elif e.ph == "M" and e.name == "process_name" and e.args is not None and e.args.name:
                    self._process_names[str(e.pid)] = e.args.name
        if memory and self._keep is not None:
            mask = self._keep("memory", memory, _memory_ts(memory))
            memory = [e for e, k in zip(memory, mask.tolist()) if k]
        self._kept += sum(len(k[0]) for k in kept.values()) + len(memory)
        if self._kept > MAX_KEPT_EVENTS:
            raise TraceValueError(f"more than {MAX_KEPT_EVENTS:,} kernels, runtime calls, CPU ops and allocator "
                                  f"events; phaseprof reads at most that many (profile fewer steps)")
        for f, (evs_f, kinds, ts_f) in kept.items():
            self._add_family(self._cols[f], evs_f, kinds, ts_f)
        if memory:
            self._add_memory(memory)

    def _add_family(self, cols: dict[str, _Growing], evs: list[Event], kinds: np.ndarray,
                    ts: np.ndarray) -> None:
        names = list(map(_NAME, evs))
        if set(map(type, names)) != _STR:
            names = [n if type(n) is str else str(n) for n in names]
        cols["kind"].append(kinds)
        cols["name"].append(self._names.codes(names))
        cols["pid"].append(self._ids.codes(list(map(_PID, evs))))
        cols["tid"].append(self._ids.codes(list(map(_TID, evs))))
        cols["ts"].append(ts)
        dur = _floats(evs, _DUR)
        dur[np.isnan(dur)] = 0.0  # as _durations
        cols["dur"].append(dur)
        args = list(map(_ARGS, evs))
        if _NONE in set(map(type, args)):
            args = [a if a is not None else _EMPTY_ARGS for a in args]
        external_id, legacy_id = list(map(_EXTERNAL_ID, args)), list(map(_LEGACY_ID, args))
        if set(legacy_id) != _NONE_ONLY:  # tb_plugin-era traces spell it "external id"
            external_id = [a if a is not None else b for a, b in zip(external_id, legacy_id)]
        cols["external_id"].append(_int_or(external_id, what="args['External id']"))
        kernel = list(map(_KERNEL_ARG, args))
        if set(map(type, kernel)) == _NONE_TYPE:  # almost always: only some launch APIs name their kernel
            cols["launched_kernel"].append(np.full(len(kernel), self._names.code(""), dtype=np.int32))
        else:
            cols["launched_kernel"].append(self._names.codes([k if type(k) is str else "" for k in kernel]))
        for c, (get, default) in _INT_ARGS.items():
            cols[c].append(_int_or(list(map(get, args)), default, what=f"args.{c}"))

    def _add_memory(self, evs: list[Event]) -> None:
        cols = self._cols["memory"]
        args = [e.args if e.args is not None else _EMPTY_ARGS for e in evs]
        cols["ts"].append(_memory_ts(evs))
        cols["pid"].append(self._ids.codes([e.pid for e in evs]))
        cols["tid"].append(self._ids.codes([e.tid for e in evs]))
        cols["bytes"].append(_int_or([a.mem_bytes for a in args], default=0, what="[memory] args.Bytes"))
        cols["total_allocated"].append(_int_or([a.total_allocated for a in args], what="[memory] Total Allocated"))
        cols["device_type"].append(_int_or([a.device_type for a in args], what="[memory] Device Type"))
        cols["device_id"].append(_int_or([a.device_id for a in args], what="[memory] Device Id"))

    def _column(self, family: str, name: str, dtype: type = np.int64) -> np.ndarray:
        column = self._cols[family].get(name)
        return column.array(dtype) if column is not None else np.zeros(0, dtype=dtype)

    def _categorical(self, codes: np.ndarray, labels: list[str] | tuple[str, ...]) -> pd.Categorical:
        """:func:`_categorical`, with this builder's faster passes where it has some (the native builder)."""
        return _categorical(codes, labels)

    def _times_ns(self, ts: np.ndarray, dur: np.ndarray, origin_us: float, check_origin_us: float, *,
                  own: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """``(ts_ns, dur_ns, end_ns)`` of :meth:`_family_frame` when every row passes its checks, by a faster path
        than numpy's; None: no such path here (the native builder has one), or some row fails a check (then
        ``ts`` and ``dur`` are as they were). ``own``: ``ts`` and ``dur`` are the caller's to drop afterwards, so
        ``ts_ns`` and ``dur_ns`` may be written over them."""
        return None

    def _family_frame(self, f: str, origin_us: float, path: str, *, may_precede: bool = False) -> pd.DataFrame:
        """``may_precede``: rows may start before the origin (module scopes: they do not set it)."""
        ts, dur = self._column(f, "ts", np.float64), self._column(f, "dur", np.float64)
        names = self._names.labels()
        check_origin = (min(origin_us, float(ts.min(initial=origin_us))) if may_precede and not np.isnan(ts).any()
                        else origin_us)
        times = self._times_ns(ts, dur, origin_us, check_origin, own=True)  # the columns go after this frame
        if times is None:
            if np.isnan(ts).any():
                raise TraceError("complete ('X') event without a timestamp", path=path)
            if (dur < 0).any():
                bad = int(np.argmax(dur < 0))
                name = names[int(self._column(f, "name")[bad])]
                raise TraceError(f"negative duration on {int((dur < 0).sum())} event(s), first: "
                                 f"{name[:60]!r} dur={dur[bad]}", path=path)
            try:
                check_times(ts, dur, check_origin, what=f.replace("_", " "))
            except TraceValueError as e:
                raise TraceError(str(e), path=path) from None
            ts_ns = np.rint((ts - origin_us) * 1000.0).astype(np.int64)
            dur_ns = np.rint(dur * 1000.0).astype(np.int64)
            times = ts_ns, dur_ns, ts_ns + dur_ns
        ids = self._ids.labels()
        return _frame({
            "kind": self._categorical(self._column(f, "kind"), _KINDS),
            "name": self._categorical(self._column(f, "name"), names),
            "pid": self._categorical(self._column(f, "pid"), ids),
            "tid": self._categorical(self._column(f, "tid"), ids),
            "ts_ns": times[0],
            "dur_ns": times[1],
            "end_ns": times[2],
            **{c: _constant_as_one(self._column(f, c)) for c in ("correlation", "external_id", "device", "stream",
                                                                   "bytes")},
            "launched_kernel": self._categorical(self._column(f, "launched_kernel"), names),
        })

    def _memory_frame(self, origin_us: float, path: str) -> pd.DataFrame:
        ids = self._ids.labels()
        ts = self._column("memory", "ts", np.float64)
        try:
            check_times(ts, np.zeros_like(ts), min(origin_us, float(ts.min(initial=origin_us))), what="[memory]")
        except TraceValueError as e:
            raise TraceError(str(e), path=path) from None
        return _frame({
            "ts_ns": np.rint((self._column("memory", "ts", np.float64) - origin_us) * 1000.0).astype(np.int64),
            "pid": self._categorical(self._column("memory", "pid"), ids),
            "tid": self._categorical(self._column("memory", "tid"), ids),
            **{c: self._column("memory", c) for c in ("bytes", "total_allocated", "device_type", "device_id")},
        })

    def exported(self) -> dict[str, Any]:
        """What :meth:`absorb` of another builder takes: this builder's columns (constant runs as (value, count)),
        its code tables and counts. The split read's child sends it to the parent (``trace.split_read``)."""
        return {"cols": {f: {c: g.exported() for c, g in cols.items()} for f, cols in self._cols.items()},
                "names": list(self._names._table), "ids": list(self._ids._table),
                "process_names": self._process_names, "event_count": self.event_count, "kept": self._kept}

    def absorb(self, other: dict[str, Any]) -> bool:
        """Append the rows of another builder's :meth:`exported` (events that follow this builder's), its name and
        id codes mapped onto this one's; False past :data:`MAX_KEPT_EVENTS` in all (a one-pass read raises
        that). Each column is dropped from ``other`` once appended, so its rows are never held twice."""
        self._kept += other["kept"]
        if self._kept > MAX_KEPT_EVENTS:
            return False
        self.event_count += other["event_count"]
        self._process_names.update(other["process_names"])  # later events win, as when read in one pass
        maps = {which: np.asarray([codes.code(v) for v in other[which]], dtype=np.int32)
                for which, codes in (("names", self._names), ("ids", self._ids))}
        received: dict[str, dict[str, Any]] = other.pop("cols")
        while received:
            f, cols = received.popitem()
            while cols:
                c, rows = cols.popitem()
                remap = maps["names"] if c in ("name", "launched_kernel") else maps["ids"] if c in ("pid", "tid") \
                    else None
                self._cols[f][c].extend(rows, remap)
                del rows
        return True

    def finish(self, doc: TraceDoc, *, path: str, sha256: str, decompressed_bytes: int,
               origin_us: float | None = None) -> EventTables:
        """The tables, with ``doc``'s top-level keys (its ``traceEvents`` are not read here) as metadata.
        ``origin_us``: the trace's origin when only part of it was kept (default: the first event kept)."""
        starts = [self._column(f, "ts", np.float64).min() for f in FAMILIES if self._cols[f]["ts"].size]
        memory_ts = self._column("memory", "ts", np.float64)
        if not starts and not memory_ts.size:
            raise TraceError("no kernels, runtime calls or CPU ops found: nothing to analyse", path=path)
        if self._kept > DENSE_KEPT_EVENTS and decompressed_bytes < MIN_BYTES_PER_KEPT_EVENT * self._kept:
            raise TraceError(f"{self._kept:,} kernels, runtime calls, CPU ops and allocator events in "
                             f"{decompressed_bytes / 1e6:,.0f} MB: denser than real traces (at least "
                             f"{MIN_BYTES_PER_KEPT_EVENT} bytes per event beyond {DENSE_KEPT_EVENTS:,} events)",
                             path=path)
        origin = origin_us if origin_us is not None else float(min(starts) if starts else memory_ts.min())
        frames = {}
        for f in FAMILIES:
            frames[f] = self._family_frame(f, origin, path)
            self._release(f)
        gpu = frames["gpu"]
        runtime_names = frames["runtime"]["name"].cat.categories  # exactly the names present
        is_rocm = doc.hip_runtime_version is not None or any(str(n).startswith("hip") for n in runtime_names)
        platform = "cpu" if gpu.empty else ("rocm" if is_rocm else "cuda")
        for key in ("deviceProperties", "distributedInfo", "phaseprof"):  # copied into the breakdown: bounded
            try:
                check_metadata(getattr(doc, key), what=key)
            except TraceValueError as e:
                raise TraceError(str(e), path=path) from None
        props = doc.deviceProperties or []
        gpu_name = None
        if not gpu.empty and props:
            used = int(gpu["device"].mode().iloc[0]) if (gpu["device"] >= 0).any() else 0
            match = [p for p in props if p.get("id") == used] or props
            gpu_name = match[0].get("name") or None
            gpu_name = gpu_name if isinstance(gpu_name, str) else None
            if gpu_name is None and is_rocm:
                gpu_name = f"AMD GPU (gfx{match[0].get('computeMajor', '?')}{match[0].get('computeMinor', '')})"
        meta = TraceMeta(
            path=path, sha256=sha256, decompressed_bytes=decompressed_bytes,
            event_count=self.event_count, platform=platform, gpu_name=gpu_name,
            device_properties=props, distributed=doc.distributedInfo or {}, versions=_versions(doc),
            origin_us=origin, has_memory_events=bool(memory_ts.size), process_names=self._process_names,
            capture=_embedded_capture(doc.phaseprof, path),
        )
        memory = self._memory_frame(origin, path)
        self._release("memory")
        del memory_ts
        modules = self._family_frame("modules", origin, path, may_precede=True)
        self._release("modules")
        return EventTables(meta=meta, gpu=gpu, runtime=frames["runtime"], ops=frames["ops"],
                           gpu_annotations=frames["gpu_annotations"], memory=memory, modules=modules)

    def _release(self, family: str) -> None:
        """Drop ``family``'s builder columns once its table is made (:meth:`finish` only: the builder takes no
        more events). The table keeps what it shares; the rest (float µs times, wide codes) is freed now rather
        than when the read ends, so each family's transient no longer stacks on the ones before it: the read's
        peak is its largest family's, not the sum."""
        self._cols[family] = defaultdict(_Growing)


def _constant_as_one(column: np.ndarray) -> np.ndarray:
    """``column``, or where every row holds one value, a read-only view of that one value repeated (stride 0): the
    same values and dtype in one element's memory. Most families leave most int columns at their default (CPU ops
    have no correlation, device, stream or bytes): 4 of the ops table's 8 int64 columns, 8.6 MB of its 18.5 on a
    115 MB trace. Table columns are read-only under pandas' copy-on-write in any case."""
    if column.size < 2:
        return column
    if column.strides != (0,) and (not (column[:4096] == column[0]).all() or not (column == column[0]).all()):
        return column  # (stride 0: one value already; a prefix first: most columns that vary show it early)
    return np.broadcast_to(np.array(column[0], dtype=column.dtype), column.shape)


def _frame(columns: dict[str, Any]) -> pd.DataFrame:
    """A DataFrame over the fresh column arrays themselves (pandas copies them by default: twice the memory)."""
    import pandas as pd

    return pd.DataFrame(columns, copy=False)


def _versions(doc: TraceDoc) -> dict[str, str]:
    keys = ("cupti_version", "cuda_runtime_version", "cuda_driver_version", "hip_runtime_version",
            "hip_driver_version", "roctracer_version", "vllm_version", "schemaVersion")
    return {k: str(getattr(doc, k)) for k in keys if getattr(doc, k) is not None}


def build_tables(doc: TraceDoc, *, path: str, sha256: str, decompressed_bytes: int, keep: Keep | None = None,
                 origin_us: float | None = None) -> EventTables:
    """Split a whole decoded document's events into families and build their tables."""
    builder = TableBuilder(keep)
    builder.add(doc.traceEvents or [])
    return builder.finish(doc, path=path, sha256=sha256, decompressed_bytes=decompressed_bytes, origin_us=origin_us)


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector: decoding allocates ~2 objects per event, none in a cycle, and each
    allocation burst would otherwise trigger collections that rescan every event decoded so far."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def label_in(column: pd.Series, names: Collection[str]) -> np.ndarray:
    """Per row, whether its label (:func:`labels`) is one of ``names``: ``np.isin(labels(column), list(names))``,
    decided once per category of a categorical column (no string per row)."""
    import pandas as pd

    if isinstance(column.dtype, pd.CategoricalDtype):
        hit = np.asarray([str(c) in names for c in column.cat.categories] + ["" in names], dtype=bool)
        return hit[column.cat.codes.to_numpy()]  # a null's code, -1, reads the last slot: ""
    return np.isin(labels(column), list(names))


def labels(column: pd.Series) -> np.ndarray:
    """A categorical (or any) column as a numpy object array of Python strings, without building pandas string
    arrays (under pandas 3, ``.astype(str)`` on a categorical materialises a pyarrow string array: slow)."""
    import pandas as pd

    if isinstance(column.dtype, pd.CategoricalDtype):
        cats = np.asarray([str(c) for c in column.cat.categories], dtype=object)
        codes = column.cat.codes.to_numpy()
        out = cats[np.maximum(codes, 0)] if cats.size else np.full(codes.size, "", dtype=object)
        return np.where(codes >= 0, out, "") if (codes < 0).any() else out
    return np.asarray([str(v) for v in column.to_numpy()], dtype=object)


def scan_trace(path: str | Path, make_keep: Callable[[], Keep]) -> Keep:
    """Stream every event of ``path`` through a filter that records what it needs and keeps nothing (pass 1 of
    ``--steps``); the filter of the pass that completed (the whole-document fallback starts a fresh one)."""
    try:
        with gc_paused():
            keep = make_keep()
            if stream_trace(path, TableBuilder(keep).add) is None:
                data, _ = read_trace_bytes(path)
                doc = decode_trace(data, path)
                del data
                keep = make_keep()
                TableBuilder(keep).add(doc.traceEvents or [])
            return keep
    except TraceValueError as e:
        raise TraceError(str(e), path=path) from None
