"""The native columnar scanner (``native/``, Rust, no dependencies, loaded with ctypes): the chunks of a trace's
``traceEvents`` array go straight into the columns :class:`~phaseprof.trace.tables.TableBuilder` keeps, without a
Python object per event.

Why: with msgspec, decoding the events into structs and routing them into columns (``TableBuilder.add``) were
~80 % of loading a trace (the rest: inflate, hashing, cutting chunks). The scanner does both in one pass over the
bytes. It reproduces the pure-Python path exactly on the input it accepts and refuses the rest: bytes that are not
JSON raise like msgspec (a chunk cut at a false separator is retried with more bytes), and anything it does not
model (a type msgspec's strict decode rejects, an integer beyond int64, an escaped key, a duplicate field)
raises :class:`NativeUnsupported`, after which the caller reads the whole trace with the pure-Python loader,
which stays the reference (``tests/trace/test_native_scan.py`` compares the two on every committed trace).

How it ships: setuptools-rust builds the crate into this folder (``_phaseprof_scan.abi3.so``; the wheel holds
it, ``pip install -e .`` builds it in place). Python never builds it. It is loaded once, and only when it
reports this module's :data:`ABI_VERSION` (``pp_abi_version``); otherwise (absent: installed from source without
cargo; another version: a stale build) the pure-Python reader runs and :func:`status` says why, in one line
(``phaseprof analyze --verbose``, ``python -m phaseprof.trace.native``).
"""

from __future__ import annotations

import ctypes
import sys
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from phaseprof.errors import PhaseprofError
from phaseprof.trace import tables
from phaseprof.trace.limits import MAX_SPAN_US, TraceValueError
from phaseprof.trace.tables import _FAMILY_COLUMNS, TableBuilder, _Growing

#: The C ABI this module speaks (``native/src/abi.rs``, ``ABI_VERSION``): a library reporting another is refused.
ABI_VERSION = 1
#: Where the library lies: setuptools-rust names it ``_phaseprof_scan.abi3.so`` (``.pyd`` on Windows).
FOLDER = Path(__file__).parent
PATTERNS = ("_phaseprof_scan*.so", "_phaseprof_scan*.pyd", "_phaseprof_scan*.dylib")
_OK, _SYNTAX, _UNSUPPORTED = 0, 1, 2
#: The scanner's families, in the order of its ABI (``pp_take``'s ``fam``), and its columns with their dtypes
#: (with ``tables._FAMILY_COLUMNS``, the one declaration: ``native/src/layout.rs`` is generated from them,
#: ``python -m phaseprof.trace.native_layout``).
_FAMILIES = ("gpu", "runtime", "ops", "gpu_annotations", "modules")
_MEMORY = 5
_MEMORY_COLUMNS = (("ts", np.float64), ("pid", np.int32), ("tid", np.int32), ("bytes", np.int64),
                   ("total_allocated", np.int64), ("device_type", np.int64), ("device_id", np.int64))


class NativeSyntaxError(msgspec.DecodeError):
    """The chunk is not a JSON array (as msgspec's DecodeError: the stream reader retries with more bytes)."""


class NativeUnsupported(PhaseprofError):
    """The scanner does not model something in this trace: read it with the pure-Python loader (a one-line
    error where ``--reader native`` forbids that)."""


@dataclass(frozen=True)
class Status:
    """The scanner's library as this process found it: ``path`` (None: no library in :data:`FOLDER`), and
    ``problem``: None where it loaded, else why it is not used (one line)."""

    path: Path | None
    problem: str | None

    @property
    def loaded(self) -> bool:
        return self.problem is None

    @property
    def refused(self) -> bool:
        """A library is there but not used (another ABI, does not load): a broken install, said even without
        ``--verbose``; an absent one is a source install without cargo."""
        return self.path is not None and self.problem is not None

    def line(self) -> str:
        """One line for people: what is used, or why not."""
        if self.problem is None:
            return f"native scanner: {self.path} (ABI {ABI_VERSION})"
        return self.problem


_lib: ctypes.CDLL | None = None
_status: Status | None = None


def _candidates() -> list[Path]:
    """The libraries in :data:`FOLDER`, newest first (a checkout may hold an older build beside a new one)."""
    found = {p for pattern in PATTERNS for p in FOLDER.glob(pattern)}
    return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)


def _open(path: Path) -> tuple[ctypes.CDLL | None, str | None]:
    """The library at ``path`` with its ABI declared, or why it cannot be used."""
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as e:
        return None, f"the native scanner {path} does not load ({(str(e).splitlines() or ['?'])[0][:160]})"
    try:
        version_of = lib.pp_abi_version
    except AttributeError:
        return None, (f"the native scanner {path} predates ABI versions (this phaseprof needs ABI {ABI_VERSION}): "
                      "reinstall phaseprof")
    version_of.restype = ctypes.c_uint32
    version_of.argtypes = []
    version = int(version_of())
    if version != ABI_VERSION:
        return None, (f"the native scanner {path} has ABI {version}, this phaseprof needs ABI {ABI_VERSION}: "
                      "reinstall phaseprof")
    vp, sz = ctypes.c_void_p, ctypes.c_size_t
    lib.pp_new.restype = vp
    lib.pp_free.argtypes = [vp]
    lib.pp_add.argtypes = [vp, vp, sz, ctypes.POINTER(ctypes.c_uint64)]
    lib.pp_add.restype = ctypes.c_int
    lib.pp_add_in_place.argtypes = [vp, vp, sz, sz, ctypes.POINTER(ctypes.c_uint64)]
    lib.pp_add_in_place.restype = ctypes.c_int
    lib.pp_take.argtypes = [vp, ctypes.c_int, ctypes.c_int, ctypes.POINTER(vp), ctypes.POINTER(sz)]
    lib.pp_take.restype = sz
    lib.pp_take_run.argtypes = [vp, ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_int64)]
    lib.pp_take_run.restype = sz
    lib.pp_release.argtypes = [vp, sz, ctypes.c_int]
    lib.pp_release.restype = ctypes.c_int
    f64p, i64p = ctypes.POINTER(ctypes.c_double), ctypes.POINTER(ctypes.c_int64)
    lib.pp_times.argtypes = [f64p, f64p, sz, ctypes.c_double, ctypes.c_double, ctypes.c_double, i64p, i64p, i64p]
    lib.pp_times.restype = ctypes.c_int
    lib.pp_times_in_place.argtypes = [f64p, f64p, sz, ctypes.c_double, ctypes.c_double, ctypes.c_double, i64p]
    lib.pp_times_in_place.restype = ctypes.c_int
    lib.pp_used.argtypes = [vp, sz, ctypes.c_int, vp, sz]
    lib.pp_used.restype = ctypes.c_int
    lib.pp_recode.argtypes = [vp, sz, ctypes.c_int, vp, sz, ctypes.c_int, vp]
    lib.pp_recode.restype = ctypes.c_int
    lib.pp_strings.argtypes = [vp, ctypes.c_int, ctypes.POINTER(vp), ctypes.POINTER(sz), ctypes.POINTER(vp)]
    lib.pp_strings.restype = sz
    lib.pp_op_parents.argtypes = [vp, vp, vp, vp, sz, vp, ctypes.c_int]
    lib.pp_op_parents.restype = None
    return lib, None


def status() -> Status:
    """Whether the scanner is used in this process and why not (found and checked once)."""
    global _lib, _status
    if _status is None:
        candidates = _candidates()
        if not candidates:
            _status = Status(None, f"the native scanner is not installed (no _phaseprof_scan library in {FOLDER}: "
                                   "a source install without cargo)")
        else:
            first_problem = None
            for path in candidates:
                lib, problem = _open(path)
                if lib is not None:
                    _lib, _status = lib, Status(path, None)
                    break
                first_problem = first_problem or problem
            else:
                _status = Status(candidates[0], first_problem)
    return _status


def library() -> ctypes.CDLL | None:
    """The loaded scanner, or None where :func:`status` says why not."""
    status()
    return _lib


def available() -> bool:
    return library() is not None


#: Code columns ``pp_used`` and ``pp_recode`` read (their ``width``: the itemsize).
_CODE_DTYPES = (np.dtype(np.int8), np.dtype(np.int32))
#: ``pp_release``'s element codes, by numpy dtype (the Rust column's element type).
_ELEM = {np.dtype(np.int8): 1, np.dtype(np.int32): 4, np.dtype(np.int64): 8, np.dtype(np.float64): 9}


def _release(lib: ctypes.CDLL, ptr: int, cap: int, elem: int) -> None:
    """Free a column :func:`_take` handed out (once: its array's finalizer)."""
    lib.pp_release(ptr, cap, elem)


def _take(lib: ctypes.CDLL, h: int, fam: int, col: int, dtype: type) -> np.ndarray:
    """Column ``col`` of family ``fam`` moved out of the scanner without a copy: a writable array over the Rust
    allocation, which is freed (``pp_release``) once the array and every view of it are gone."""
    ptr, cap = ctypes.c_void_p(), ctypes.c_size_t()
    n = lib.pp_take(h, fam, col, ctypes.byref(ptr), ctypes.byref(cap))
    dt = np.dtype(dtype)
    if not n:
        lib.pp_release(ptr, cap.value, _ELEM[dt])
        return np.zeros(0, dtype=dt)
    owner = (ctypes.c_char * (cap.value * dt.itemsize)).from_address(ptr.value)
    # Not at exit: an array still alive then may yet be read by some object's teardown; the exit frees it anyway.
    weakref.finalize(owner, _release, lib, ptr.value, cap.value, _ELEM[dt]).atexit = False
    return np.frombuffer(owner, dtype=dt, count=n)  # its base is ``owner``: the allocation lives as long


def _take_column(lib: ctypes.CDLL, h: int, fam: int, col: int, dtype: type) -> _Growing | None:
    """Column ``col`` of family ``fam`` moved out of the scanner (a constant run as one; None: no rows)."""
    value = ctypes.c_int64()
    n = lib.pp_take_run(h, fam, col, ctypes.byref(value))
    if n:
        column = _Growing()
        column.append_run(np.array([value.value], dtype=dtype), n)
        return column
    values = _take(lib, h, fam, col, dtype)
    return _Growing.of(values) if values.size else None


def _strings(lib: ctypes.CDLL, h: int, which: int) -> list[bytes]:
    blob, blob_len, offsets = ctypes.c_void_p(), ctypes.c_size_t(), ctypes.c_void_p()
    n = lib.pp_strings(h, which, ctypes.byref(blob), ctypes.byref(blob_len), ctypes.byref(offsets))
    data = ctypes.string_at(blob.value, blob_len.value) if blob_len.value else b""
    offs = np.frombuffer(ctypes.string_at(offsets.value, 8 * (n + 1)), dtype=np.uint64).tolist()
    return [data[offs[i]:offs[i + 1]] for i in range(n)]


def _id(key: bytes) -> object:
    """A pid/tid as the pure-Python loader keys it: int, str or None (the scanner tags them i/s/n)."""
    tag, text = key[:1], key[1:]
    return int(text) if tag == b"i" else text.decode() if tag == b"s" else None


class NativeTableBuilder(TableBuilder):
    """A :class:`TableBuilder` fed chunk bytes (:meth:`add_json`, a :data:`~phaseprof.trace.stream.Chunks`)
    instead of decoded events; its columns are moved into the Python builder's before :meth:`finish`,
    :meth:`exported` or :meth:`absorb`, which then run unchanged."""

    def __init__(self) -> None:
        super().__init__(None)
        lib = library()
        if lib is None:
            raise NativeUnsupported("the native scanner is not built")
        self._lib = lib
        self._h: int | None = lib.pp_new()

    def __del__(self) -> None:
        h, self._h = getattr(self, "_h", None), None
        if h is not None:
            self._lib.pp_free(h)

    def add(self, events: Any) -> None:  # the decoded-event entry point is the pure-Python builder's only
        raise NativeUnsupported("NativeTableBuilder takes chunk bytes (add_json)")

    def add_json(self, data: bytes | bytearray | memoryview) -> int:
        """Scan one chunk ``[event, ...]``; the number of events in it. A chunk that is a view into a bytearray
        with room after it (the stream reader's buffer) is scanned in place: the scanner borrows the 64 bytes
        after it for the call (restored before it returns) instead of copying the chunk."""
        counts = (ctypes.c_uint64 * 2)()
        if isinstance(data, bytes):
            rc = self._lib.pp_add(self._h, ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p), len(data), counts)
        elif (isinstance(data, memoryview) and isinstance(data.obj, bytearray) and not data.readonly
              and data.c_contiguous and data.nbytes == len(data) > 0):
            whole = (ctypes.c_char * len(data.obj)).from_buffer(data.obj)  # the bytearray's start (and a pin)
            arr = np.frombuffer(data, dtype=np.uint8)
            room = ctypes.addressof(whole) + len(whole) - (arr.ctypes.data + len(data))
            rc = self._lib.pp_add_in_place(self._h, arr.ctypes.data, len(data), room, counts)
            del arr, whole
        else:
            n = len(data)
            arr = np.frombuffer(data, dtype=np.uint8) if n else np.zeros(0, dtype=np.uint8)
            rc = self._lib.pp_add(self._h, arr.ctypes.data, n, counts)
            del arr
        if rc == _SYNTAX:
            raise NativeSyntaxError("not a JSON array of events")
        if rc != _OK:
            raise NativeUnsupported("the native scanner does not model this trace")
        events, kept = int(counts[0]), int(counts[1])
        self.event_count += events
        self._kept += kept
        limit = tables.MAX_KEPT_EVENTS  # looked up now, as TableBuilder.add does (tests lower it)
        if self._kept > limit:
            raise TraceValueError(f"more than {limit:,} kernels, runtime calls, CPU ops and allocator "
                                  f"events; phaseprof reads at most that many (profile fewer steps)")
        return events

    def _materialise(self) -> None:
        """Move the scanner's columns, codes and process names into this builder (once); frees the scanner."""
        h = self._h
        if h is None:
            return
        lib = self._lib
        for fam, columns, f in [*((i, _FAMILY_COLUMNS, f) for i, f in enumerate(_FAMILIES)),
                                (_MEMORY, _MEMORY_COLUMNS, "memory")]:
            for col, (c, dtype) in enumerate(columns):
                column = _take_column(lib, h, fam, col, dtype)
                if column is not None:
                    self._cols[f][c] = column
        self._names._table = {s.decode(): i for i, s in enumerate(_strings(lib, h, 0))}
        self._ids._table = {_id(s): i for i, s in enumerate(_strings(lib, h, 1))}
        pairs = _strings(lib, h, 2)
        for k, v in zip(pairs[::2], pairs[1::2]):
            self._process_names[k.decode()] = v.decode()
        self._h = None
        lib.pp_free(h)

    def _categorical(self, codes: np.ndarray, labels: list[str] | tuple[str, ...]) -> Any:
        return tables._categorical(codes, labels, (self._used_codes, self._recode))

    def _used_codes(self, codes: np.ndarray, n_labels: int) -> np.ndarray | None:
        """The codes used, sorted, by one scanner pass (``pp_used``: a mark per label); None: numpy's way."""
        if codes.dtype not in _CODE_DTYPES or not codes.flags.c_contiguous:
            return None
        used = np.zeros(n_labels, dtype=np.uint8)
        if self._lib.pp_used(codes.ctypes.data, codes.size, codes.itemsize, used.ctypes.data, n_labels):
            return None
        return np.flatnonzero(used)

    def _recode(self, remap: np.ndarray, codes: np.ndarray) -> np.ndarray | None:
        """``remap[codes]`` by one scanner pass (``pp_recode``); None: numpy's way."""
        if (codes.dtype not in _CODE_DTYPES or not codes.flags.c_contiguous or remap.dtype.kind != "i"
                or not remap.flags.c_contiguous):
            return None
        out = np.empty(codes.size, dtype=remap.dtype)
        if self._lib.pp_recode(codes.ctypes.data, codes.size, codes.itemsize, remap.ctypes.data, remap.size,
                               remap.itemsize, out.ctypes.data):
            return None
        return out

    def _times_ns(self, ts: np.ndarray, dur: np.ndarray, origin_us: float, check_origin_us: float, *,
                  own: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """The scanner's one pass (``pp_times``): the same values as the numpy expressions, bit for bit, and the
        same checks (None where one fails: the numpy path then raises its error). ``own``: written over ``ts``
        and ``dur`` where they are writable contiguous float64 columns (``pp_times_in_place``: checks first, so a
        refusal leaves them as they were), ``end_ns`` the one new column (2.1 GB, 7.6M rows: 0.31 -> 0.12-0.16 s
        of fresh pages and copies)."""
        if ts.dtype != np.float64 or dur.dtype != np.float64 or ts.shape != dur.shape or ts.ndim != 1:
            return None
        f64p, i64p = ctypes.POINTER(ctypes.c_double), ctypes.POINTER(ctypes.c_int64)
        if (own and ts.size and ts.flags.c_contiguous
                and dur.flags.c_contiguous and ts.flags.writeable and dur.flags.writeable and ts.flags.aligned
                and dur.flags.aligned and not np.shares_memory(ts, dur)):
            end = np.empty(ts.size, dtype=np.int64)
            ok = self._lib.pp_times_in_place(ts.ctypes.data_as(f64p), dur.ctypes.data_as(f64p), ts.size, origin_us,
                                             check_origin_us, MAX_SPAN_US, end.ctypes.data_as(i64p))
            return (ts.view(np.int64), dur.view(np.int64), end) if ok else None
        ts, dur = (np.require(a, requirements=["C", "A"]) for a in (ts, dur))  # the pass reads aligned f64
        out = [np.empty(ts.size, dtype=np.int64) for _ in range(3)]
        ok = self._lib.pp_times(ts.ctypes.data_as(f64p), dur.ctypes.data_as(f64p), ts.size, origin_us,
                                check_origin_us, MAX_SPAN_US, *(a.ctypes.data_as(i64p) for a in out))
        return (out[0], out[1], out[2]) if ok else None

    def exported(self) -> dict[str, Any]:
        self._materialise()
        return super().exported()

    def absorb(self, other: dict[str, Any]) -> bool:
        self._materialise()
        return super().absorb(other)

    def finish(self, *args: Any, **kw: Any) -> Any:
        self._materialise()
        return super().finish(*args, **kw)


def op_parents(ts: np.ndarray, end: np.ndarray, key: np.ndarray, order: np.ndarray | None,
               out_dtype: type) -> np.ndarray | None:
    """``trace.correlate._sweep``'s parents of every op in one native pass (``pp_op_parents``), as rows of
    ``out_dtype`` (int32 or int64), or None where the scanner is not built or the columns are not its types (the
    caller's array path runs). ``ts``/``end``: int64 per row; ``key``: the int32 thread code per row; ``order``:
    the row at each sweep position (None: the rows are in sweep order). The GIL is released while it runs."""
    lib = library()
    dt = np.dtype(out_dtype)
    if lib is None or dt not in (np.dtype(np.int32), np.dtype(np.int64)):
        return None
    n = ts.size
    if (ts.dtype != np.int64 or end.dtype != np.int64 or key.dtype != np.int32 or ts.ndim != 1
            or end.shape != ts.shape or key.shape != ts.shape or (order is not None and order.shape != ts.shape)):
        return None
    if order is not None and (order.dtype != np.int64 or (n and not (0 <= order.min() and order.max() < n))):
        return None  # rows the native pass would read out of bounds
    aligned = ["C", "A"]  # the pass reads whole aligned integers
    ts, end = np.require(ts, requirements=aligned), np.require(end, requirements=aligned)
    one_thread = n == 0 or key.strides == (0,) or key.min() == key.max()
    key_c = None if one_thread else np.require(key, requirements=aligned)
    order_c = None if order is None else np.require(order, requirements=aligned)
    out = np.empty(n, dtype=dt)
    lib.pp_op_parents(ts.ctypes.data, end.ctypes.data, None if key_c is None else key_c.ctypes.data,
                      None if order_c is None else order_c.ctypes.data, n, out.ctypes.data, dt.itemsize)
    return out


def builder_for(keep: tables.Keep | None, native: bool) -> TableBuilder:
    """A TableBuilder, fed decoded events (pure Python) or chunk bytes (``native``: this scanner's)."""
    return NativeTableBuilder() if native else TableBuilder(keep)


if __name__ == "__main__":
    found = status()
    print(found.line(), file=sys.stdout if found.loaded else sys.stderr)
    sys.exit(0 if found.loaded else 1)
