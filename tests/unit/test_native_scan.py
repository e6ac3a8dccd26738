"""The native scanner (``native/``, ``phaseprof/trace/native.py``) gives exactly the pure-Python loader's tables.

The pure-Python loader (msgspec structs + ``TableBuilder.add``) is the reference: every committed trace file and
every public trace (``public`` tier) is loaded both ways, the scanner forced (``native=True``: it may not fall
back), and compared frame by frame, dtypes and metadata included; files that are not traces must give the same
error. Also: the split read with the scanner in both processes, 4 KB pieces (cuts at false separators, inside
strings), and a real trace edited into something the scanner does not model (it must refuse, and the automatic
path must fall back to the reference's tables).
"""

from __future__ import annotations

import gzip
import re
import shutil
from pathlib import Path

import pytest

from phaseprof.errors import TraceError
from phaseprof.trace import native
from phaseprof.trace.stream import stream_trace
from phaseprof.trace.read import load_tables
from phaseprof.trace.tables import EventTables

from ..conftest import REPO
from .test_stream_loader import assert_same_tables

#: Every JSON file under traces/ on a path naming a trace (the captures' run.json, breakdown.json beside them
#: too: those must fail the same way both ways).
COMMITTED = sorted(p for p in (REPO / "traces").rglob("*.json*") if "trace" in str(p.relative_to(REPO)))
EAGER_DECODE = next((REPO / "traces" / "h200" / "eager").glob("*decode-128in*/trace.json.gz"))
FRAMES = ("gpu", "runtime", "ops", "gpu_annotations", "memory", "modules")


@pytest.fixture(scope="module", autouse=True)
def scanner_built() -> None:
    """Build the scanner when this checkout has not (``scripts/install.sh`` does); skip only without cargo."""
    if native.available():
        return
    if shutil.which("cargo") is None:
        pytest.skip("cargo not installed: the native scanner cannot be built here (the pure-Python loader runs)")
    problem = native.build(quiet=True)
    assert problem is None, problem
    native._tried = False
    assert native.available()


def outcome(path: Path, *, native_scan: bool) -> EventTables | str:
    try:
        return load_tables(path, native=native_scan)
    except TraceError as e:
        return f"TraceError: {e}"


def assert_same(path: Path) -> None:
    a, b = outcome(path, native_scan=True), outcome(path, native_scan=False)
    if isinstance(a, str) or isinstance(b, str):
        assert a == b
        return
    assert_same_tables(a, b)
    for f in FRAMES:  # beyond assert_frame_equal: the very dtypes, modules included
        assert list(getattr(a, f).dtypes) == list(getattr(b, f).dtypes), f


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: str(p.relative_to(REPO / "traces")))
def test_committed_traces_same_tables(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PHASEPROF_SPLIT_READ", "0")  # one process each: the split read is tested below
    assert_same(path)


def test_public_traces_same_tables(public_trace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PHASEPROF_SPLIT_READ", "0")
    assert_same(public_trace)


def test_split_read_native_in_both_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PHASEPROF_SPLIT_READ", "1")  # split even below the size threshold
    assert_same(EAGER_DECODE)


def test_small_pieces_cut_everywhere() -> None:
    """4 KB pieces: most cuts fall at false separators or inside strings, and must be retried, not misread."""
    builder = native.NativeTableBuilder()
    s = stream_trace(EAGER_DECODE, None, piece_bytes=4096, chunks=builder.add_json)
    assert s is not None
    a = builder.finish(s.doc, path=str(EAGER_DECODE), sha256=s.sha256, decompressed_bytes=s.decompressed_bytes)
    assert_same_tables(a, load_tables(EAGER_DECODE, native=False))


def test_unmodelled_input_falls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel named by a number (msgspec takes it, the Python builder writes ``str(7)``) is not modelled: the
    scanner refuses it and the automatic path reads the trace with the pure-Python loader."""
    monkeypatch.setenv("PHASEPROF_SPLIT_READ", "0")
    data = gzip.decompress(EAGER_DECODE.read_bytes())
    # the capture wrote compact JSON, scripts/cut_trace.py (which cut it to 3 steps) Kineto's ", " / ": "
    m = re.search(rb'"cat":\s?"kernel",\s?"name":\s?"[^"]*"', data)
    assert m is not None
    edited = tmp_path / "trace.json"
    edited.write_bytes(data[:m.start()] + b'"cat": "kernel", "name": 7' + data[m.end():])
    with pytest.raises(native.NativeUnsupported):
        load_tables(edited, native=True)
    auto, reference = load_tables(edited), load_tables(edited, native=False)
    assert "7" in set(reference.gpu["name"].cat.categories)
    assert_same_tables(auto, reference)


def test_switched_off_by_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(native.NATIVE_ENV, "0")
    assert not native.available()


def test_meanwhile_overlaps_the_read_and_its_error_comes_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """``load_tables(meanwhile=work)``: the same tables; ``work`` runs on another thread while the scanner reads
    (before the read on the pure-Python path, whose decoding holds the GIL), has finished when the tables come
    back, and its exception is raised in preference to the read's own."""
    import threading

    monkeypatch.setenv("PHASEPROF_SPLIT_READ", "1")  # the split read: the thread starts once the child is forked
    for native_scan in (True, False):
        ran: list[bool] = []
        tables = load_tables(EAGER_DECODE, native=native_scan,
                             meanwhile=lambda: ran.append(threading.current_thread() is threading.main_thread()))
        assert ran == [not native_scan]
        assert_same_tables(tables, load_tables(EAGER_DECODE, native=False))

        def fails() -> None:
            raise ValueError("bad rules")

        with pytest.raises(ValueError, match="bad rules"):
            load_tables(EAGER_DECODE, native=native_scan, meanwhile=fails)
        with pytest.raises(ValueError, match="bad rules"):  # the read's own error (not a trace) comes second
            load_tables(REPO / "pyproject.toml", native=native_scan, meanwhile=fails)


@pytest.mark.parametrize("number", [
    "1.5", "5175041884072.509", "0.1", "0.30000000000000004", "9007199254740992.0", "9007199254740993.0",
    "90071992547409931.5", "0.1234567890123456789012", "0.12345678901234567890123", "123456789012345678.0",
    "1e3", "1.5E-3", "2.5e+2", "0", "7", "0.0", "999999999999999999", "1000000000000000000", "4.35"])
def test_numbers_as_the_reference_decodes_them(tmp_path: Path, number: str) -> None:
    """Timestamps, durations and integer args on the scanner's quick paths (an integer of up to 18 digits; a
    decimal of at most 2^53 in its digits and 22 after the point) and just past them: the same values both ways."""
    ints = number if "." not in number and "e" not in number.lower() else "12"
    dur = number if float(number) < 1e9 else "1.5"  # a trace spans at most 7 days (trace.limits)
    events = [f'{{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":{number},"dur":{d},'
              f'"args":{{"correlation":{ints},"device":0,"stream":7,"bytes":-{ints}}}}}'
              for d in (dur, "0.25", dur)]
    trace = tmp_path / "trace.json"
    trace.write_text('{"traceEvents":[' + ",".join(events) + "]}")
    a, b = load_tables(trace, native=True), load_tables(trace, native=False)
    assert_same_tables(a, b)
    assert a.meta.origin_us == b.meta.origin_us == float(number)  # the timestamp itself, as a double
    assert a.gpu["dur_ns"].tolist() == b.gpu["dur_ns"].tolist()
