"""The chunked loader (phaseprof/trace/stream.py) gives exactly the tables of the whole-document path.

Every committed trace and every public trace (``public`` tier) is loaded both ways and compared frame by frame,
as stored and re-serialised compactly / on one line / indented / in Kineto's layout, in 1 MB and in 4 KB pieces (so that cuts fall
everywhere, including inside strings). Inputs the chunked path does not handle (a bare array, duplicate keys,
odd types, several gzip members, invalid JSON) must fall back and still give the same tables or the same error.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path
from typing import Any

import pandas.testing as pdt
import pytest

from phaseprof.errors import TraceError
from phaseprof.trace import stream
from phaseprof.trace.stream import stream_trace
from phaseprof.trace.read import load_tables
from phaseprof.trace.tables import EventTables, TableBuilder

from ..conftest import PUBLIC_CUT_DIR, REPO
from .test_bad_input import CASES as BAD_INPUTS

FIXTURES = sorted(PUBLIC_CUT_DIR.glob("*.json.gz"))
COMMITTED = sorted((REPO / "traces").rglob("*.json.gz"))  # the fixtures and the captures (traces/<gpu>/<run>/)
FRAMES = ("gpu", "runtime", "ops", "gpu_annotations", "memory")


def assert_same_tables(a: EventTables, b: EventTables) -> None:
    assert dataclasses.asdict(a.meta) == dataclasses.asdict(b.meta)
    for f in FRAMES:
        pdt.assert_frame_equal(getattr(a, f), getattr(b, f), check_exact=True, check_categorical=True, obj=f)


def streamed(path: Path, **kw: Any) -> EventTables:
    """The chunked path only: fails the test if it would have fallen back."""
    builder = TableBuilder()
    s = stream_trace(path, builder.add, **kw)
    assert s is not None, f"{path.name}: the chunked path fell back to the whole document"
    return builder.finish(s.doc, path=str(path), sha256=s.sha256, decompressed_bytes=s.decompressed_bytes)


def outcome(path: Path, **kw: Any) -> EventTables | str:
    """load_tables' tables, or its error message."""
    try:
        return load_tables(path, **kw)
    except TraceError as e:
        return f"TraceError: {e}"


def assert_same_outcome(path: Path) -> None:
    a, b = outcome(path), outcome(path, streaming=False)
    if isinstance(a, str) or isinstance(b, str):
        assert a == b
    else:
        assert_same_tables(a, b)


# --- re-serialisations of a document --------------------------------------------------------------------------

def kineto_style(doc: dict[str, Any]) -> str:
    """The layout libkineto writes: keys on their own lines, one event per block, ``],`` before the trailer."""
    keys = list(doc)
    out = ["{"]
    for i, k in enumerate(keys):
        comma = "," if i < len(keys) - 1 else ""
        if k == "traceEvents":
            events = ",\n".join("  {\n    " + json.dumps(e)[1:-1] + "\n  }" for e in doc[k])
            out.append(f'  "traceEvents": [\n{events}\n  ]{comma}')
        else:
            out.append(f"  {json.dumps(k)}: {json.dumps(doc[k])}{comma}")
    return "\n".join(out) + "\n}\n"


STYLES = {
    "compact": lambda d: json.dumps(d, separators=(",", ":")),
    "one_line": json.dumps,
    "indented": lambda d: json.dumps(d, indent=2),
    "kineto": kineto_style,
}


def write(path: Path, text: str | bytes, *, gz: bool = True) -> Path:
    data = text.encode() if isinstance(text, str) else text
    path.write_bytes(gzip.compress(data, mtime=0) if gz else data)
    return path


def events_last(doc: dict[str, Any]) -> dict[str, Any]:
    """The same keys with ``traceEvents`` moved last (the fixtures, like Kineto, have keys after it)."""
    return {**{k: v for k, v in doc.items() if k != "traceEvents"}, "traceEvents": doc["traceEvents"]}


# --- every committed trace -----------------------------------------------------------------------------------

@pytest.mark.parametrize("fixture", COMMITTED, ids=lambda p: str(p.relative_to(REPO / "traces")).split(".json")[0])
def test_fixture_streams_to_the_same_tables(fixture: Path) -> None:
    whole = load_tables(fixture, streaming=False)
    assert_same_tables(streamed(fixture), whole)
    assert_same_tables(streamed(fixture, piece_bytes=4096), whole)


@pytest.mark.parametrize("style", list(STYLES))
@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: p.name.split(".json")[0])
def test_fixture_in_every_layout(fixture: Path, style: str, tmp_path: Path) -> None:
    doc = json.loads(gzip.decompress(fixture.read_bytes()))
    if style in ("compact", "kineto"):  # the other two keep the fixture's order: keys after the events
        doc = events_last(doc)
    p = write(tmp_path / "t.json.gz", STYLES[style](doc))
    whole = load_tables(p, streaming=False)
    assert_same_tables(streamed(p), whole)
    assert_same_tables(streamed(p, piece_bytes=4096), whole)


# --- every public trace (wider tier) --------------------------------------------------------------------------

def test_public_trace_streams_to_the_same_tables(public_trace: Path) -> None:
    assert_same_tables(streamed(public_trace), load_tables(public_trace, streaming=False))


def test_public_trace_compact(public_trace: Path, tmp_path: Path) -> None:
    orjson = pytest.importorskip("orjson")
    doc = orjson.loads(gzip.decompress(public_trace.read_bytes()))
    p = write(tmp_path / "compact.json", orjson.dumps(doc), gz=False)  # no spaces, one line
    del doc
    assert_same_tables(streamed(p), load_tables(p, streaming=False))


# --- small inline traces: what each odd input does ------------------------------------------------------------

def events(kernel_name: str = "gemm", extra_args: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    return [
        {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1.5, "dur": 10,
         "args": {"External id": 3}},
        {"ph": "X", "cat": "python_function", "name": "model.py(12): forward", "pid": 1, "tid": 1, "ts": 1, "dur": 20,
         "args": {"Python id": 2}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 2, "dur": 3,
         "args": {"correlation": 7, "External id": 3, **(extra_args or {})}},
        {"ph": "f", "id": 7, "pid": 1, "tid": 1, "ts": 2, "cat": "ac2g", "name": "ac2g", "bp": "e"},
        {"ph": "X", "cat": "kernel", "name": kernel_name, "pid": 0, "tid": 7, "ts": 6, "dur": 4.25,
         "args": {"correlation": 7, "device": 0, "stream": 7}},
        {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": 3, "s": "t",
         "args": {"Bytes": 512, "Total Allocated": 512, "Device Type": 1, "Device Id": 0}},
    ]


def doc_of(evs: list[dict[str, Any]], **top: Any) -> dict[str, Any]:
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "Test GPU"}], "traceEvents": evs, **top}


NO_FALLBACK = {
    # a separator inside a string, and inside a nested list of objects: a cut there is retried, not fatal
    "separator_in_name": json.dumps(doc_of(events("f<{a}, {b}>::{lambda()#1}, {lambda()#2}") * 40)),
    "objects_in_args": json.dumps(doc_of(events(extra_args={"x": [{"a": 1}, {"b": [2]}, {}]}) * 40)),
    "trailer_with_objects": json.dumps({"traceEvents": events() * 40, "traceName": "t",
                                        "deviceProperties": [{"id": 0, "name": "G"}, {"id": 1, "name": "H"}],
                                        "distributedInfo": {"rank": 0}}),
    "trailer_with_brackets": json.dumps(doc_of(events() * 40, traceName="a]b", logs=["x]", "]", [[]]])),
    "events_first_no_trailer": json.dumps({"traceEvents": events() * 40}),
    "byte_order_mark": "\ufeff" + json.dumps(doc_of(events() * 3)),
    "only_memory_events": json.dumps(doc_of([events()[-1]] * 3)),
    "non_string_names_and_ids": json.dumps(doc_of([{**e, "pid": str(e["pid"])} if i % 2 else e
                                                   for i, e in enumerate(events(kernel_name=7) * 5)])),
    "whitespace_everywhere": "\r\n\t" + json.dumps(doc_of(events() * 5), indent="\t").replace(",", " \r\n ,\t")
    + "\n\n",
}

FALLBACK = {
    "bare_array": json.dumps(events() * 5),
    "duplicate_top_level_key": json.dumps(doc_of(events()))[:-1] + ', "schemaVersion": 2}',
    "events_twice": json.dumps(doc_of(events()))[:-1] + ', "traceEvents": []}',
    "events_null": json.dumps(doc_of(None)),
    "lenient_types": json.dumps(doc_of(events(extra_args={"External id": "3"}))),
    "form_feed_between_events": json.dumps(doc_of(events())).replace("}, {", "}\f, {"),
    "truncated_after_events": json.dumps(doc_of(events()))[:-2],
    "header_not_an_object": '["traceEvents", {"traceEvents": [' + json.dumps(events())[1:] + "}]",
    "comma_before_events": '{ , "traceEvents": ' + json.dumps(events()) + "}",
}


@pytest.mark.parametrize("case", list(NO_FALLBACK))
@pytest.mark.parametrize("piece_bytes", [None, 7, 64])
def test_inline_streams_to_the_same_tables(case: str, piece_bytes: int | None, tmp_path: Path) -> None:
    for gz in (True, False):
        p = write(tmp_path / ("t.json.gz" if gz else "t.json"), NO_FALLBACK[case], gz=gz)
        assert_same_tables(streamed(p, piece_bytes=piece_bytes), load_tables(p, streaming=False))


@pytest.mark.parametrize("case", list(FALLBACK))
def test_odd_input_falls_back_with_the_same_outcome(case: str, tmp_path: Path) -> None:
    p = write(tmp_path / "t.json", FALLBACK[case], gz=False)
    assert stream_trace(p, lambda evs: None) is None
    assert_same_outcome(p)


def test_several_gzip_members_stream_like_gzip_dc(tmp_path: Path) -> None:
    # `cat a.gz b.gz` is one valid gzip file (gzip -dc and gzip.decompress read every member); it used to loop
    # forever once the first member ended. Members cut mid-event and mid-key, with zero padding after the last.
    text = json.dumps(doc_of(events() * 50)).encode()
    p = tmp_path / "two_members.json.gz"
    p.write_bytes(gzip.compress(text[:1000]) + gzip.compress(text[1000:5000]) + gzip.compress(text[5000:])
                  + bytes(4096))
    assert stream_trace(p, lambda evs: None, piece_bytes=512) is not None
    assert_same_tables(streamed(p, piece_bytes=512), load_tables(p, streaming=False))


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_gives_the_same_error(case: str, tmp_path: Path) -> None:
    make, _ = BAD_INPUTS[case]
    assert_same_outcome(make(tmp_path))


def test_metadata_from_header_and_trailer(tmp_path: Path) -> None:
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "Test GPU"}], "traceEvents": events(),
           "hip_runtime_version": 60200, "distributedInfo": {"rank": 3}, "traceName": "x"}
    t = streamed(write(tmp_path / "t.json.gz", kineto_style(doc)))
    assert (t.meta.platform, t.meta.gpu_name, t.meta.distributed) == ("rocm", "Test GPU", {"rank": 3})
    assert t.meta.versions == {"hip_runtime_version": "60200", "schemaVersion": "1"}
    assert (t.meta.event_count, t.meta.process_names, t.meta.has_memory_events) == (7, {"0": "GPU 0"}, True)


def test_only_a_chunk_is_decoded_at_a_time(tmp_path: Path) -> None:
    p = write(tmp_path / "t.json.gz", json.dumps(doc_of(events() * 3000)))
    sizes: list[int] = []
    assert stream_trace(p, lambda evs: sizes.append(len(evs)), piece_bytes=16384) is not None
    assert sum(sizes) == 7 * 3000 and len(sizes) > 100 and max(sizes) < 300  # ~128 events a 16 KB piece


def test_decoder_constants_are_json_whitespace_only() -> None:
    # \f and \v are whitespace to Python but not to JSON: a regex \s would cut out bytes the decoder rejects
    assert stream._WS == b" \t\n\r" and b"\\s" not in stream._SEP.pattern + stream._EVENTS_KEY.pattern


def test_long_whitespace_between_events_streams(tmp_path: Path) -> None:
    # Blank pieces skip the separator scan (a run of blanks is scanned once, not once per piece); the cut still
    # lands on the right boundaries: streamed tables equal the whole-document ones.
    evs = [json.dumps(e) for e in events() * 3]
    text = '{"traceEvents": [' + (" " * 50_000 + ",\n" + " " * 30_000).join(evs) + "]}"
    p = write(tmp_path / "blanks.json.gz", text)
    assert_same_tables(streamed(p, piece_bytes=4096), load_tables(p, streaming=False))


@pytest.mark.parametrize(("trace", "families"), [
    ("traces/cpu/tiny-hybrid-prefill128-decode8/trace.json.gz", {"ops", "memory"}),
    ("traces/h200/hooks/eager-prefill-4096/trace.json.gz", {"gpu", "runtime", "ops", "modules"}),
])
def test_finish_frees_each_familys_builder_columns(trace: str, families: set[str]) -> None:
    """``finish`` drops a family's builder columns once its table is made (the read's peak is then its largest
    family's transient, not the sum of all), and the tables are still those of the whole-document path."""
    import gc
    import weakref

    path = REPO / trace
    builder = TableBuilder()
    s = stream_trace(path, builder.add)
    assert s is not None
    # The float µs times: no table shares them (tables hold ns integers), so nothing may keep them alive.
    held = {(f, c): weakref.ref(g.data) for f, cols in builder._cols.items() for c, g in cols.items()
            if c in ("ts", "dur") and g.data is not None}
    assert {(f, "ts") for f in families} <= held.keys()
    tables = builder.finish(s.doc, path=str(path), sha256=s.sha256, decompressed_bytes=s.decompressed_bytes)
    gc.collect()
    alive = sorted(k for k, ref in held.items() if ref() is not None)
    assert alive == [], f"builder columns still held after finish: {alive}"
    assert all(not cols for cols in builder._cols.values())
    assert_same_tables(tables, load_tables(path, streaming=False))
