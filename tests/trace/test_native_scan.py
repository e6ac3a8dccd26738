"""The native scanner (``native/``, ``phaseprof/trace/native.py``) gives exactly the pure-Python loader's tables.

The pure-Python loader (msgspec structs + ``TableBuilder.add``) is the reference: every committed trace file and
every public trace (``public`` tier) is loaded both ways, the scanner forced (``Reader.NATIVE``: it may not fall
back), and compared frame by frame, dtypes and metadata included; files that are not traces must give the same
error. Also: the split read with the scanner in both processes, 4 KB pieces (cuts at false separators, inside
strings), and a real trace edited into something the scanner does not model (it must refuse, and the automatic
path must fall back to the reference's tables). The scanner has one path on every x86-64 CPU (SSE2, part of
x86-64; 8 bytes a step elsewhere): an AVX2 variant measured no faster and was dropped (docs/scale.md).
"""

from __future__ import annotations

import gzip
import pickle
import re
from pathlib import Path

import pytest

from phaseprof.errors import EnvironmentProblem, TraceError
from phaseprof.trace import native
from phaseprof.trace.stream import stream_trace
from phaseprof.trace.read import load_tables
from phaseprof.trace.readers import Reader
from phaseprof.trace.tables import EventTables

from ..conftest import REPO
from ..native_build import scanner_or_skip
from .test_stream_loader import assert_same_tables

#: Every JSON file under traces/ on a path naming a trace (the captures' run.json, breakdown.json beside them
#: too: those must fail the same way both ways).
COMMITTED = sorted(p for p in (REPO / "traces").rglob("*.json*") if "trace" in str(p.relative_to(REPO)))
EAGER_DECODE = next((REPO / "traces" / "h200" / "eager").glob("*decode-128in*/trace.json.gz"))
FRAMES = ("gpu", "runtime", "ops", "gpu_annotations", "memory", "modules")


@pytest.fixture(scope="module", autouse=True)
def scanner_built() -> None:
    """The scanner loaded (``pip install -e .`` builds it; else cargo here); skip only without cargo."""
    scanner_or_skip()


def outcome(path: Path, *, native_scan: bool) -> EventTables | str:
    try:
        return load_tables(path, reader=Reader.NATIVE if native_scan else Reader.PYTHON)
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
    assert_same_tables(a, load_tables(EAGER_DECODE, reader=Reader.PYTHON))


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
        load_tables(edited, reader=Reader.NATIVE)
    auto, reference = load_tables(edited), load_tables(edited, reader=Reader.PYTHON)
    assert "7" in set(reference.gpu["name"].cat.categories)
    assert_same_tables(auto, reference)


def test_reader_option_and_what_the_tables_say() -> None:
    """``Reader.PYTHON`` never touches the scanner; the tables say which reader made them and why."""
    py = load_tables(EAGER_DECODE, reader=Reader.PYTHON)
    assert py.read_by.reader == "python" and py.read_by.line() == "read by the pure-Python reader: --reader python"
    auto = load_tables(EAGER_DECODE)
    assert auto.read_by.reader == "native" and f"ABI {native.ABI_VERSION}" in auto.read_by.line()
    assert_same_tables(auto, py)


def _refused(monkeypatch: pytest.MonkeyPatch, version: int | None) -> native.Status:
    """The status the loader gives a library reporting ABI ``version`` (None: no ``pp_abi_version``)."""

    class Fake:
        def __init__(self, path: str) -> None:
            if version is not None:
                self.pp_abi_version = lambda: version

    monkeypatch.setattr(native.ctypes, "CDLL", Fake)
    monkeypatch.setattr(native, "_status", None)
    monkeypatch.setattr(native, "_lib", None)
    return native.status()


@pytest.mark.parametrize(("version", "says"), [(native.ABI_VERSION + 1, f"has ABI {native.ABI_VERSION + 1}, this "
                                                f"phaseprof needs ABI {native.ABI_VERSION}: reinstall phaseprof"),
                                               (None, "predates ABI versions")])
def test_another_abi_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch, version: int | None,
                                            says: str) -> None:
    found = _refused(monkeypatch, version)
    assert found.refused and not found.loaded and native.library() is None
    assert says in found.line() and "\n" not in found.line()
    tables = load_tables(EAGER_DECODE)  # auto: the pure-Python reader, saying why
    assert tables.read_by.reader == "python" and says in tables.read_by.line()
    with pytest.raises(EnvironmentProblem, match="--reader native: the native scanner .* reinstall phaseprof"):
        load_tables(EAGER_DECODE, reader=Reader.NATIVE)


def test_a_library_that_does_not_load_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Not a shared library (or one needing a newer glibc than the machine's): refused, the reason in one line."""
    (tmp_path / "_phaseprof_scan.abi3.so").write_bytes(b"not an ELF file")
    monkeypatch.setattr(native, "FOLDER", tmp_path)
    monkeypatch.setattr(native, "_status", None)
    monkeypatch.setattr(native, "_lib", None)
    found = native.status()
    assert found.refused and "_phaseprof_scan.abi3.so does not load (" in found.line()
    assert "\n" not in found.line() and load_tables(EAGER_DECODE).read_by.reader == "python"


def test_absent_scanner(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(native, "FOLDER", tmp_path)
    monkeypatch.setattr(native, "_status", None)
    monkeypatch.setattr(native, "_lib", None)
    found = native.status()
    assert not found.loaded and not found.refused and "not installed" in found.line()
    assert "not installed" in load_tables(EAGER_DECODE).read_by.why


def test_meanwhile_overlaps_the_read_and_its_error_comes_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """``load_tables(meanwhile=work)``: the same tables; ``work`` runs on another thread while the scanner reads
    (before the read on the pure-Python path, whose decoding holds the GIL), has finished when the tables come
    back, and its exception is raised in preference to the read's own."""
    import threading

    monkeypatch.setenv("PHASEPROF_SPLIT_READ", "1")  # the split read: the thread starts once the child is forked
    for native_scan in (True, False):
        ran: list[bool] = []
        tables = load_tables(EAGER_DECODE, reader=Reader.NATIVE if native_scan else Reader.PYTHON,
                             meanwhile=lambda: ran.append(threading.current_thread() is threading.main_thread()))
        assert ran == [not native_scan]
        assert_same_tables(tables, load_tables(EAGER_DECODE, reader=Reader.PYTHON))

        def fails() -> None:
            raise ValueError("bad rules")

        with pytest.raises(ValueError, match="bad rules"):
            load_tables(EAGER_DECODE, reader=Reader.NATIVE if native_scan else Reader.PYTHON, meanwhile=fails)
        with pytest.raises(ValueError, match="bad rules"):  # the read's own error (not a trace) comes second
            load_tables(REPO / "pyproject.toml", reader=Reader.NATIVE if native_scan else Reader.PYTHON, meanwhile=fails)


@pytest.mark.parametrize("number", [
    "1.5", "5175041884072.509", "0.1", "0.30000000000000004", "9007199254740992.0", "9007199254740993.0",
    "90071992547409931.5", "0.1234567890123456789012", "0.12345678901234567890123", "123456789012345678.0",
    "1e3", "1.5E-3", "2.5e+2", "0", "7", "0.0", "999999999999999999", "1000000000000000000", "4.35",
    # 8, 9, 15, 16, 17 and 19 digits (the SWAR digit paths' edges) and 20 (past the exact u64 range)
    "12345678", "123456789", "123456789012345", "1234567890123456", "12345678901234567", "1234567890123456789",
    "12345678.12345678", "1234567.123456789012", "5175041884072.50913", "12345678901234567890.5", "10.000000000000001"])
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
    a, b = load_tables(trace, reader=Reader.NATIVE), load_tables(trace, reader=Reader.PYTHON)
    assert_same_tables(a, b)
    assert a.meta.origin_us == b.meta.origin_us == float(number)  # the timestamp itself, as a double
    assert a.gpu["dur_ns"].tolist() == b.gpu["dur_ns"].tolist()


def _kernel_events(data: bytes) -> list[re.Match[bytes]]:
    return list(re.finditer(rb'"cat":\s?"kernel",\s?"name":\s?"([^"\\]*)"', data))


@pytest.mark.parametrize("number", ["-5", "-0", "-0.0", "-1.25", "-12345678901234567", "-9223372036854775808",
                                    "9223372036854775807", "9223372036854775808", "01", "1.", "-", ".5", "+1",
                                    "1.5.2", "1e", "--1", "0x10", "1_000"])
def test_signed_and_malformed_numbers_as_the_reference(tmp_path: Path, number: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Signs, int64's ends and numbers that are not JSON, as an integer arg and as a timestamp: the same tables or
    the same error both ways (the scanner refuses what is not JSON, the whole-document path says why; an integer
    beyond int64 is left to the pure-Python loader)."""
    monkeypatch.setenv("PHASEPROF_SPLIT_READ", "0")
    events = [f'{{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":{ts},"dur":1.5,'
              f'"args":{{"correlation":1,"device":0,"stream":7,"bytes":{number}}}}}' for ts in ("10.5", number)]
    for i, event in enumerate(events):
        trace = tmp_path / f"trace{i}.json"
        trace.write_text('{"traceEvents":[' + event + "]}")
        if number == "9223372036854775808":
            with pytest.raises(native.NativeUnsupported):
                load_tables(trace, reader=Reader.NATIVE)
            with pytest.raises(TraceError) as auto:
                load_tables(trace)
            assert f"TraceError: {auto.value}" == outcome(trace, native_scan=False)
        else:
            assert_same(trace)


def test_escaped_and_non_ascii_names_at_every_offset(tmp_path: Path) -> None:
    """Real kernel names with one character written as a \\u escape, or a 2-byte UTF-8 character put in, at each
    offset 0-79 in turn: the string paths (16 bytes, then 32 or 16 a step) meet them at every position."""
    data = gzip.decompress(EAGER_DECODE.read_bytes())
    parts, end = [], 0
    for j, m in enumerate(_kernel_events(data)):
        name = m.group(1)
        at = j % 80
        if at >= len(name):
            continue
        edit = f"\\u{name[at]:04x}".encode() if j % 2 else "\u00e9".encode()
        parts += [data[end:m.start(1) + at], edit, data[m.start(1) + at + (j % 2):m.end(1)]]
        end = m.end(1)
    edited = tmp_path / "trace.json"
    edited.write_bytes(b"".join(parts) + data[end:])
    a, b = load_tables(edited, reader=Reader.NATIVE), load_tables(edited, reader=Reader.PYTHON)
    assert_same_tables(a, b)
    assert any("\u00e9" in n for n in a.gpu["name"].cat.categories)


def test_keys_in_another_order_and_indented(tmp_path: Path) -> None:
    """The trace written again with each event's keys in another order (every other event sorted: the keys
    expected at a position from the last event are then often wrong) and indented (whitespace around every
    key): the same tables both ways."""
    import json

    doc = json.loads(gzip.decompress(EAGER_DECODE.read_bytes()))
    doc["traceEvents"] = [dict(sorted(e.items())) if i % 2 else e for i, e in enumerate(doc["traceEvents"])]
    for indent in (None, 1):
        edited = tmp_path / f"trace{indent}.json"
        edited.write_text(json.dumps(doc, indent=indent))
        assert_same(edited)


def test_duplicate_key_where_a_key_is_expected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel event whose first key is "dur" (its own "dur" comes later, at the position where every kernel
    has it): the scanner refuses the duplicate (which of the two msgspec keeps is not modelled) and the automatic
    path falls back to the reference's tables."""
    monkeypatch.setenv("PHASEPROF_SPLIT_READ", "0")
    data = gzip.decompress(EAGER_DECODE.read_bytes())
    m = _kernel_events(data)[len(_kernel_events(data)) // 2]
    ph = data.rindex(b'"ph"', 0, m.start())
    assert data[ph:m.start()].replace(b" ", b"") == b'"ph":"X",'
    edited = tmp_path / "trace.json"
    edited.write_bytes(data[:ph] + b'"dur": 1.5, ' + data[m.start():])
    with pytest.raises(native.NativeUnsupported):
        load_tables(edited, reader=Reader.NATIVE)
    assert_same_tables(load_tables(edited), load_tables(edited, reader=Reader.PYTHON))


def test_chunk_scanned_in_place_leaves_the_buffer_as_it_was() -> None:
    """A chunk inside a bytearray with room after it (the stream reader's buffer) is scanned in place: the bytes
    after it are borrowed for the call and restored, after a chunk that scans and after one that does not."""
    data = gzip.decompress(EAGER_DECODE.read_bytes())
    start = data.index(b"[", data.index(b'"traceEvents"'))
    cut = _kernel_events(data)[40].start()
    chunk = data[start:data.rindex(b"}", 0, cut) + 1] + b"]"
    in_place, copied = native.NativeTableBuilder(), native.NativeTableBuilder()
    buf = bytearray(chunk + data[cut:cut + 200])
    before = bytes(buf)
    with memoryview(buf) as view:
        assert in_place.add_json(view[:len(chunk)]) == copied.add_json(chunk) > 40
        with pytest.raises(native.NativeSyntaxError):  # cut inside a string
            in_place.add_json(view[:len(chunk) - 3])
    assert bytes(buf) == before
    assert pickle.dumps(in_place.exported()) == pickle.dumps(copied.exported())  # columns, codes, counts


@pytest.mark.parametrize("number", ["99999999999999999999999", "1e400", "-1e400", "123456789012345678901234567890.5"])
def test_numbers_beyond_range_in_keys_not_read_are_skipped(tmp_path: Path, number: str) -> None:
    """A number no double or int64 holds, under keys phaseprof does not read (an event's and an args' own): msgspec
    skips it, and so does the scanner (it refuses such a number only where it reads the value)."""
    event = (f'{{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":10.5,"dur":1.5,"queued":{number},'
             f'"args":{{"correlation":1,"device":0,"stream":7,"grid":[{number},1,1],"registers per thread":{number}}}}}')
    trace = tmp_path / "trace.json"
    trace.write_text('{"traceEvents":[' + event + "," + event + "]}")
    assert_same(trace)


def test_names_alike_at_both_ends(tmp_path: Path) -> None:
    """Real kernel names of 40 characters or more with the middle one changed (one of five letters by event):
    names of one length and the same first and last 16 bytes, which the scanner's name cache cannot tell apart
    without comparing them whole, each keep their own code."""
    data = gzip.decompress(EAGER_DECODE.read_bytes())
    parts, end, edited_names = [], 0, set()
    for j, m in enumerate(_kernel_events(data)):
        name = m.group(1)
        if len(name) < 40:
            continue
        mid = m.start(1) + len(name) // 2
        parts += [data[end:mid], b"ABCDE"[j % 5:j % 5 + 1]]
        end = mid + 1
        edited_names.add(len(name))
    assert edited_names
    edited = tmp_path / "trace.json"
    edited.write_bytes(b"".join(parts) + data[end:])
    a, b = load_tables(edited, reader=Reader.NATIVE), load_tables(edited, reader=Reader.PYTHON)
    assert_same_tables(a, b)
