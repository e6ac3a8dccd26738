"""The step from the scanner's columns to the tables: columns handed over without a copy
(``pp_take``/``pp_release``), times in one native pass (``pp_times``) and categoricals from a count of the codes used
(``tables._categorical``), each against the plain expression it replaces, on the columns of real committed traces.
The whole tables stay compared native vs pure-Python in ``test_native_scan.py``."""

from __future__ import annotations

import gc
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from phaseprof.errors import TraceError
from phaseprof.trace import native, tables
from phaseprof.trace.limits import MAX_SPAN_US
from phaseprof.trace.stream import stream_trace

from ..conftest import REPO
from .test_native_scan import scanner_built  # noqa: F401 - the fixture: builds the scanner or skips

#: Real traces of every kind: CUDA eager and graph, ROCm, tb_plugin era, CPU engine, module scopes, a TP rank.
TRACES = [REPO / "traces" / p for p in (
    "h200/eager/20261130T094747Z-h200-qwen3.5-35b-a3b-decode-128in-32out/trace.json.gz",
    "h200/graph/20261130T094743Z-h200-qwen3.5-35b-a3b-decode-128in-32out/trace.json.gz",
    "public-cut/mi300x_vllm_llama70b_tp4_decode_2steps.json.gz",
    "public-cut/v100_tb_plugin_resnet50_2steps.json.gz",
    "cpu/tiny-hybrid-prefill128-decode8/trace.json.gz",
    "h200/hooks/eager-prefill-4096/trace.json.gz",
    "h200x2/tp2-eager-prefill4096-decode8/rank0.pt.trace.json.gz",
)]
FAMILIES = ("gpu", "runtime", "ops", "gpu_annotations", "modules")


def scanned(path: Path) -> native.NativeTableBuilder:
    """A native builder holding ``path``'s columns (moved out of the scanner)."""
    builder = native.NativeTableBuilder()
    assert stream_trace(path, builder.add, chunks=builder.add_json) is not None
    builder._materialise()
    return builder


def test_traces_exist() -> None:
    assert [p for p in TRACES if not p.is_file()] == []


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.parent.name if p.name == "trace.json.gz" else p.name)
def test_categorical_as_built_from_strings(path: Path) -> None:
    """``_categorical`` is ``pd.Categorical`` of the row labels: the same categories (sorted, only those used, same
    dtype), codes and codes dtype, on every categorical column of the trace (int8 and int16 codes among them)."""
    builder = scanned(path)
    names, ids = builder._names.labels(), builder._ids.labels()
    widths = set()
    for f in FAMILIES:
        for col, labels in (("kind", tables._KINDS), ("name", names), ("pid", ids), ("tid", ids),
                            ("launched_kernel", names)):
            codes = builder._column(f, col)
            want = pd.Categorical([labels[c] for c in codes.tolist()])
            # numpy's passes (the pure-Python builder's), then the scanner's (pp_used, pp_recode)
            for got in (tables._categorical(codes, labels), builder._categorical(codes, labels)):
                assert got.categories.dtype == want.categories.dtype, (f, col)
                assert list(got.categories) == list(want.categories), (f, col)
                assert got.codes.dtype == want.codes.dtype, (f, col)
                assert np.array_equal(got.codes, want.codes), (f, col)
                assert got.ordered == want.ordered
                widths.add(got.codes.dtype)
    assert np.dtype(np.int8) in widths


def test_native_code_passes_as_numpy_and_refusals() -> None:
    """pp_used and pp_recode give numpy's results on a trace's name codes (int32, int16 out) and kinds (int8);
    a code outside the labels or the remap, or a dtype they do not read, gives None (numpy's path decides)."""
    builder = scanned(TRACES[0])
    names = builder._names.labels()
    for col, n_labels in (("name", len(names)), ("kind", len(tables._KINDS))):
        codes = builder._column("gpu", col)
        assert codes.strides != (0,) and codes.size > 100
        used = builder._used_codes(codes, n_labels)
        assert np.array_equal(used, np.flatnonzero(np.bincount(codes)))
        for width in (np.int8, np.int16, np.int32, np.int64):
            remap = (np.arange(int(used[-1]) + 1) % 100).astype(width)
            got = builder._recode(remap, codes)
            assert got.dtype == width and np.array_equal(got, remap[codes])
    codes = builder._column("gpu", "name").copy()
    codes[7] = len(names)
    assert builder._used_codes(codes, len(names)) is None
    assert builder._recode(np.zeros(len(names), dtype=np.int16), codes) is None
    codes[7] = -1
    assert builder._used_codes(codes, len(names)) is None
    assert builder._recode(np.zeros(len(names), dtype=np.int16), codes) is None
    assert builder._used_codes(codes.astype(np.int64), len(names)) is None
    assert builder._recode(np.zeros(3, dtype=np.int8), codes[::2]) is None


def test_categorical_of_many_labels_and_a_constant_column() -> None:
    """Beyond 127 categories pandas keeps int16 codes; a stride-0 (constant) column gives one category."""
    builder = scanned(TRACES[0])
    names = builder._names.labels()
    assert len(names) > 127
    codes = np.arange(len(names), dtype=np.int32)[::-1].copy()
    got = tables._categorical(codes, names)
    want = pd.Categorical([names[c] for c in codes.tolist()])
    assert got.codes.dtype == want.codes.dtype == np.int16
    assert np.array_equal(got.codes, want.codes) and list(got.categories) == list(want.categories)
    const = np.broadcast_to(np.array(3, dtype=np.int32), (5000,))
    got = tables._categorical(const, names)
    assert list(got.categories) == [names[3]] and got.codes.dtype == np.int8 and not got.codes.any()


def numpy_times(ts: np.ndarray, dur: np.ndarray, origin: float) -> tuple[np.ndarray, ...]:
    """The expressions pp_times replaces (``TableBuilder._family_frame``'s numpy path)."""
    ts_ns = np.rint((ts - origin) * 1000.0).astype(np.int64)
    dur_ns = np.rint(dur * 1000.0).astype(np.int64)
    return ts_ns, dur_ns, ts_ns + dur_ns


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.parent.name if p.name == "trace.json.gz" else p.name)
def test_native_times_as_numpy(path: Path) -> None:
    """pp_times gives numpy's int64 nanoseconds exactly, on every family of the trace, at the trace's origin and
    at origins shifted by fractions of a nanosecond (other rounding cases)."""
    builder = scanned(path)
    starts = [builder._column(f, "ts", np.float64).min() for f in FAMILIES if builder._cols[f]["ts"].size]
    for shift in (0.0, -0.0004, -0.0005, -0.25, -1.5e-3):
        origin = float(min(starts)) + shift
        for f in FAMILIES:
            ts, dur = builder._column(f, "ts", np.float64), builder._column(f, "dur", np.float64)
            check = min(origin, float(ts.min(initial=origin)))
            got = builder._times_ns(ts, dur, origin, check)
            assert got is not None, f
            for g, w in zip(got, numpy_times(ts, dur, origin)):
                assert g.dtype == np.int64 and np.array_equal(g, w), f


def test_native_times_halfway_and_refused() -> None:
    """Halves round to even as np.rint; a row failing one of the loader's checks (NaN or infinite time, negative or
    too long duration, before the origin or beyond the span) gives None, so the numpy path raises its error."""
    builder = scanned(TRACES[4])
    ts = np.array([0.0005, 0.0015, 0.0025, 1.0000005, 2.5e-4, 10.0, 1e3 + 0.0035])
    dur = np.array([0.0005, 0.0015, 0.0025, 0.0035, 0.0, 3.5e-4, 1.25])
    for origin in (0.0, 1e-4):
        got = builder._times_ns(ts, dur, -origin, -origin)
        assert got is not None
        for g, w in zip(got, numpy_times(ts, dur, -origin)):
            assert np.array_equal(g, w)
    for bad_ts, bad_dur, check in ((np.nan, 1.0, 0.0), (np.inf, 1.0, 0.0), (5.0, -1e-9, 0.0), (5.0, np.nan, 0.0),
                                   (5.0, MAX_SPAN_US * 1.01, 0.0), (MAX_SPAN_US * 1.01, 1.0, 0.0),
                                   (5.0, 1.0, 6.0)):
        t, d = ts.copy(), dur.copy()
        t[3], d[3] = bad_ts, bad_dur
        assert builder._times_ns(t, d, 0.0, check) is None, (bad_ts, bad_dur, check)


@pytest.mark.parametrize("path", TRACES[:6], ids=lambda p: p.parent.name if p.name == "trace.json.gz" else p.name)
def test_native_times_in_place_as_numpy(path: Path) -> None:
    """``own=True`` (pp_times_in_place) gives numpy's int64 nanoseconds exactly, written over the float columns
    it was handed (ts_ns and dur_ns share their memory), with one new column for the ends."""
    builder = scanned(path)
    starts = [builder._column(f, "ts", np.float64).min() for f in FAMILIES if builder._cols[f]["ts"].size]
    origin = float(min(starts)) - 0.0005
    for f in FAMILIES:
        ts, dur = builder._column(f, "ts", np.float64).copy(), builder._column(f, "dur", np.float64).copy()
        if not ts.size:
            continue
        want = numpy_times(ts, dur, origin)
        got = builder._times_ns(ts, dur, origin, min(origin, float(ts.min())), own=True)
        assert got is not None, f
        assert np.shares_memory(got[0], ts) and np.shares_memory(got[1], dur) and not np.shares_memory(got[2], ts)
        for g, w in zip(got, want):
            assert g.dtype == np.int64 and np.array_equal(g, w), f


def test_native_times_in_place_refused_leaves_the_columns() -> None:
    """A row failing a check anywhere (the last row too) gives None with both columns untouched, bit for bit, so
    the numpy path reads them and raises its error; columns it may not write (read-only) are copied instead."""
    builder = scanned(TRACES[4])
    ts = np.linspace(0.0, 5e3, 2000)
    dur = np.full(2000, 1.25)
    for at in (0, 1000, 1999):
        t, d = ts.copy(), dur.copy()
        d[at] = -1.0
        t0, d0 = t.copy(), d.copy()
        assert builder._times_ns(t, d, 0.0, 0.0, own=True) is None
        assert t.tobytes() == t0.tobytes() and d.tobytes() == d0.tobytes()
    t, d = ts.copy(), dur.copy()
    t.flags.writeable = False
    got = builder._times_ns(t, d, 0.0, 0.0, own=True)
    assert got is not None and not np.shares_memory(got[0], t)
    assert all(np.array_equal(g, w) for g, w in zip(got, numpy_times(ts, dur, 0.0)))
    raw = bytearray(ts.nbytes + 1)  # a float column one byte off alignment: copied, never written over
    t = np.frombuffer(raw, dtype=np.float64, count=ts.size, offset=1)
    t[:] = ts
    assert not t.flags.aligned
    got = builder._times_ns(t, dur.copy(), 0.0, 0.0, own=True)
    assert got is not None and not np.shares_memory(got[0], t) and np.array_equal(t, ts)
    assert all(np.array_equal(g, w) for g, w in zip(got, numpy_times(ts, dur, 0.0)))


def test_native_finish_raises_the_numpy_paths_errors() -> None:
    """A row the native pass refuses reaches the numpy path's error, as the pure-Python builder gives it."""
    path = TRACES[0]
    for edit, message in (((0, "ts", np.nan), "without a timestamp"), ((2, "dur", -1.0), "negative duration"),
                          ((1, "dur", MAX_SPAN_US * 2), "duration outside")):
        builder = native.NativeTableBuilder()
        s = stream_trace(path, builder.add, chunks=builder.add_json)
        builder._materialise()
        fam, col, value = edit
        column = builder._cols[FAMILIES[fam]][col]
        assert column.size > 100
        column.data[column.size // 2] = value
        with pytest.raises(TraceError, match=message):
            builder.finish(s.doc, path=str(path), sha256="", decompressed_bytes=1 << 30)


def test_taken_columns_released_once_when_unused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each column moved out of the scanner is freed exactly once, only after the last array over it is gone (a
    table's column keeps it), and taking a column twice hands out nothing the second time."""
    released: list[tuple[int, int, int]] = []
    real = native._release

    def counting(lib: object, ptr: int, cap: int, elem: int) -> None:
        released.append((ptr, cap, elem))
        real(lib, ptr, cap, elem)

    monkeypatch.setattr(native, "_release", counting)
    path = TRACES[0]
    builder = native.NativeTableBuilder()
    s = stream_trace(path, builder.add, chunks=builder.add_json)
    lib, h = builder._lib, builder._h
    taken = []
    orig_take = native._take

    def recording(*a: object) -> np.ndarray:
        arr = orig_take(*a)
        if arr.size:
            taken.append(arr.ctypes.data)
        return arr

    monkeypatch.setattr(native, "_take", recording)
    builder._materialise()
    assert builder._h is None and len(taken) > 20
    external_id = builder._column("ops", "external_id")  # a column that is not constant: the array taken
    assert external_id.ctypes.data in taken
    t = builder.finish(s.doc, path=str(path), sha256=s.sha256, decompressed_bytes=s.decompressed_bytes)
    del builder
    gc.collect()
    kept = t.ops["external_id"].to_numpy()
    assert np.shares_memory(kept, external_id)
    assert external_id.ctypes.data not in [p for p, _, _ in released]
    del external_id, kept
    gc.collect()
    assert len({p for p, _, _ in released}) == len(released)  # none twice
    in_use = set(taken) - {p for p, _, _ in released}
    assert in_use  # the tables' own int columns are the scanner's arrays
    del t
    gc.collect()
    assert sorted(p for p, _, _ in released) == sorted(taken)
    assert len({p for p, _, _ in released}) == len(released)
    del lib, h


def test_take_twice_runs_and_release_codes() -> None:
    """A column taken is gone from the scanner (a second take: no rows, no allocation); a constant column (CPU
    ops' correlation: -1 on every op) is handed over as its run, the rows it counts as the ops' timestamps;
    pp_release refuses an unknown element code and frees nothing for an empty column."""
    lib = native.library()
    builder = native.NativeTableBuilder()
    stream_trace(TRACES[0], builder.add, chunks=builder.add_json)
    first = native._take(lib, builder._h, 0, 4, np.float64)
    assert first.size > 0 and first.flags.writeable
    second = native._take(lib, builder._h, 0, 4, np.float64)
    assert second.size == 0
    ops = tables.FAMILIES.index("ops")
    ops_ts = native._take(lib, builder._h, ops, 4, np.float64)
    value = native.ctypes.c_int64()
    rows = lib.pp_take_run(builder._h, ops, 8, native.ctypes.byref(value))
    assert rows == ops_ts.size > 100 and value.value == -1
    assert lib.pp_take_run(builder._h, ops, 8, native.ctypes.byref(value)) == 0  # taken: no run left
    assert native._take(lib, builder._h, ops, 8, np.int64).size == 0
    assert lib.pp_take_run(builder._h, ops, 4, native.ctypes.byref(value)) == 0  # a float column: never a run
    assert lib.pp_release(None, 0, 9) == 0
    assert lib.pp_release(None, 8, 3) == -1


def test_run_left_then_chunk_refused_keeps_the_rows_before() -> None:
    """A chunk that ends a constant run (a CPU op of a real trace edited to carry a correlation) and then fails
    (cut mid-event) leaves the column as it was before that chunk: the same rows and values, -1 throughout."""
    import gzip
    import json

    events = json.loads(gzip.decompress(TRACES[0].read_bytes()))["traceEvents"]
    ops = [e for e in events if e.get("cat") == "cpu_op" and e.get("ph") == "X"][:60]
    edited = {**ops[50], "args": {**ops[50]["args"], "correlation": 5}}
    first = ("[" + ",".join(json.dumps(e) for e in ops[:50]) + "]").encode()
    cut = json.dumps(ops[51])
    second = ("[" + json.dumps(edited) + "," + cut[:len(cut) // 2]).encode()
    builder = native.NativeTableBuilder()
    assert builder.add_json(first) == 50
    with pytest.raises(native.NativeSyntaxError):
        builder.add_json(second)
    lib, h = builder._lib, builder._h
    ops_fam = tables.FAMILIES.index("ops")
    column = native._take_column(lib, h, ops_fam, 8, np.int64)  # correlation
    assert column is not None and column.size == 50
    assert np.array_equal(column.array(np.int64), np.full(50, -1))
    assert native._take(lib, h, ops_fam, 4, np.float64).size == 50  # ts: the same rows
