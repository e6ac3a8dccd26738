"""The native scanner's predictions (``native/src/event.rs``) at their edges: the same tables as the pure-Python
loader, or the same refusal, wherever what it predicts from the events before is wrong.

The scanner learns, at each position of an event and of its args (args by category), the bytes from the end of
the value before through the next key, its colon and the whitespace after it (the "gap", up to 32 bytes), and
takes the key from one 32-byte compare when the bytes repeat. It also caches the last two pids and tids, the last
category's routing, and recent names by their first and last 16 bytes. Each test below writes events that break
one of those guesses: whitespace that changes from event to event, keys that share a prefix with a learnt one,
gaps of 31 to 34 bytes, chunks cut inside a gap that was learnt, categories that share an args prediction, three
pids in turn, categories alike in their first bytes, names alike in their first and last 16 bytes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from phaseprof.trace import native
from phaseprof.trace.read import load_tables
from phaseprof.trace.readers import Reader

from .test_native_scan import assert_same, scanner_built  # noqa: F401 (the fixture builds the scanner)
from .test_stream_loader import assert_same_tables


def _trace(tmp_path: Path, events: list[str], name: str = "trace.json") -> Path:
    trace = tmp_path / name
    trace.write_text('{"traceEvents":[' + ",".join(events) + "]}")
    return trace


def _kernel(i: int, *, sep: str = ", ", colon: str = ": ", extra: str = "") -> str:
    """A kernel event in Kineto's key order, written with the separators given."""
    fields = [("ph", '"X"'), ("cat", '"kernel"'), ("name", f'"k{i % 3}"'), ("pid", "0"), ("tid", "7"),
              ("ts", f"{10 + i}.5"), ("dur", "1.25")]
    args = f'{{"correlation"{colon}{100 + i}{sep}"device"{colon}0{sep}"stream"{colon}7{extra}}}'
    return "{" + sep.join(f'"{k}"{colon}{v}' for k, v in fields) + f'{sep}"args"{colon}{args}' + "}"


def test_whitespace_changing_from_event_to_event(tmp_path: Path) -> None:
    """After a gap is learnt, the next events put more, less or other whitespace before and after each colon and
    comma (a gap that matches may be followed by more whitespace; one that does not is read the long way)."""
    seps = [", ", ",", " , ", ",\n  ", ", \t"]
    colons = [": ", ":", " : ", ":  ", ":\n"]
    events = [_kernel(i, sep=seps[i % len(seps)], colon=colons[(i // 2) % len(colons)]) for i in range(60)]
    assert_same(_trace(tmp_path, events))


@pytest.mark.parametrize(("key", "before"), [("t", "ts"), ("tss", "ts"), ("ts ", "ts"), ("Ts", "ts"), ("pi", "pid"),
                                             ("pidx", "pid"), ("du", "dur"), ("durr", "dur"), ("arg", "args"),
                                             ("argss", "args"), ("name2", "name"), ("devic", "device")])
def test_keys_sharing_a_prefix_with_a_learnt_one(tmp_path: Path, key: str, before: str) -> None:
    """Every third event has one more key, not read, at the position where a key it shares a prefix with was
    learnt (``"t"`` where ``"ts"`` was, ``"tss"``, ...): the gap's closing quote tells them apart."""
    events = []
    for i in range(30):
        e = _kernel(i)
        if i % 3 == 2:
            at = e.index(f'"{before}"')
            e = e[:at] + f'"{key}": 5, ' + e[at:]
        events.append(e)
    assert_same(_trace(tmp_path, events))


@pytest.mark.parametrize("length", [25, 26, 27, 28, 29, 30])
def test_gaps_around_32_bytes(tmp_path: Path, length: int) -> None:
    """Keys not read of 25-30 characters (gaps of 31-36 bytes with ``, "`` and ``": ``): learnt while they fit in
    32 bytes, read the long way beyond; a key one character longer or shorter comes next at the same position."""
    events = []
    for i in range(24):
        key = "k" * (length + (i % 3) - 1)
        events.append(_kernel(i, extra=f', "{key}": {i}, "{key}x": [1, 2]'))
    assert_same(_trace(tmp_path, events))


def test_duplicate_key_at_a_learnt_position(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After ten events have taught the args' gaps, one repeats "device" at the position "stream" was learnt:
    the scanner refuses it (which of two duplicates msgspec keeps is not modelled), as before the prediction."""
    events = [_kernel(i) for i in range(10)]
    events.append(_kernel(10).replace('"stream": 7', '"device": 1'))
    monkeypatch.setenv("PHASEPROF_SPLIT_READ", "0")
    trace = _trace(tmp_path, events)
    with pytest.raises(native.NativeUnsupported):
        load_tables(trace, reader=Reader.NATIVE)
    assert_same_tables(load_tables(trace), load_tables(trace, reader=Reader.PYTHON))


def _array(events: list[str]) -> bytes:
    return ("[" + ", ".join(events) + "]").encode()


def test_chunk_cut_inside_a_learnt_gap() -> None:
    """A chunk of events whose gaps were learnt, cut at every byte of its last event: each prefix is refused as
    not JSON (the stream reader then merges the next piece), copied or scanned in place, with the bytes after the
    cut being the rest of the event (which the scanner must not read as part of the chunk)."""
    events = [_kernel(i) for i in range(4)]
    whole = _array(events)
    start = whole.rindex(b"{")
    full = native.NativeTableBuilder()
    assert full.add_json(whole) == 4
    for cut in range(start, len(whole) - 1):
        builder = native.NativeTableBuilder()
        with pytest.raises(native.NativeSyntaxError):
            builder.add_json(whole[:cut])
        buf = bytearray(whole + bytes(100))
        with memoryview(buf) as view, pytest.raises(native.NativeSyntaxError):
            builder.add_json(view[:cut])
        assert bytes(buf) == whole + bytes(100)


def test_categories_sharing_an_args_prediction(tmp_path: Path) -> None:
    """CPU ops and memcpys share one args prediction (their categories mix to the same kind), kernels another;
    they come in turn, with args of their own, and with args before the category (no category yet: kind 0)."""
    events = []
    for i in range(40):
        kind = i % 4
        if kind == 0:
            events.append(f'{{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 834, "tid": 834, '
                          f'"ts": {20 + i}.25, "dur": 2.5, "args": {{"External id": {i}, "Record function id": 0, '
                          f'"Ev Idx": {i}}}}}')
        elif kind == 1:
            events.append(f'{{"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "pid": 0, "tid": 17, '
                          f'"ts": {20 + i}.5, "dur": 0.75, "args": {{"External id": {i}, "device": 0, '
                          f'"context": 1, "stream": 17, "correlation": {i}, "bytes": {8 * i}}}}}')
        elif kind == 2:
            events.append(_kernel(i))
        else:
            events.append(f'{{"args": {{"External id": {i}, "cbid": 211, "correlation": {i}}}, "ph": "X", '
                          f'"cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 834, "tid": 834, '
                          f'"ts": {20 + i}.75, "dur": 3.0}}')
    assert_same(_trace(tmp_path, events))


def test_three_pids_and_tids_in_turn(tmp_path: Path) -> None:
    """Pids and tids cycling through three integers and a string (the scanner keeps the last two of each): every
    event keeps its own pid and tid codes."""
    pids = ["834", "0", "835", '"Spans"', "0", "834"]
    tids = ["834", "17", "7", "834", '"PyTorch Profiler"', "13"]
    events = [_kernel(i).replace('"pid": 0', f'"pid": {pids[i % 6]}').replace('"tid": 7', f'"tid": {tids[i % 5]}')
              for i in range(45)]
    trace = _trace(tmp_path, events)
    a, b = load_tables(trace, reader=Reader.NATIVE), load_tables(trace, reader=Reader.PYTHON)
    assert_same_tables(a, b)
    assert len(set(a.gpu["pid"].astype(str))) == 4


@pytest.mark.parametrize("cats", [("kernel", "kernels", "kerne"), ("cpu_op", "cpu_o", "cpu_op "),
                                  ("gpu_user_annotation", "gpu_user_annotatio", "gpu_user_annotationx"),
                                  ("cuda_runtime", "cuda_runtimf", "Runtime"), ("gpu_memset", "gpu_memcpy", "Memset")])
def test_categories_alike_in_turn(tmp_path: Path, cats: tuple[str, ...]) -> None:
    """Categories that differ in their length or last byte, known and not, in turn (the scanner keeps the last
    category's routing): each event routed by its own."""
    events = [_kernel(i).replace('"cat": "kernel"', f'"cat": "{cats[i % 3]}"') for i in range(30)]
    assert_same(_trace(tmp_path, events))


@pytest.mark.parametrize("length", [1, 15, 16, 17, 31, 32, 33, 48])
def test_names_alike_in_their_first_and_last_bytes(tmp_path: Path, length: int) -> None:
    """Names of one length that differ in one byte, at the start, the middle or the end, and the same names
    written with a \\u escape (the same name once decoded, read from the decoding buffer, not the chunk): each
    distinct name one code, as the reference gives."""
    base = ("abcdefghijklmnopqrstuvwxyz0123456789" * 2)[:length]
    names = []
    for at in sorted({0, length // 2, length - 1}):
        for c in "XYZ":
            names.append(base[:at] + c + base[at + 1:])
    events = []
    for i, name in enumerate(names * 3):
        written = name if i % 2 else "\\u%04x" % ord(name[0]) + name[1:]
        events.append(_kernel(i).replace(f'"name": "k{i % 3}"', f'"name": "{written}"'))
    trace = _trace(tmp_path, events)
    a, b = load_tables(trace, reader=Reader.NATIVE), load_tables(trace, reader=Reader.PYTHON)
    assert_same_tables(a, b)
    assert set(a.gpu["name"].astype(str)) == set(names)


@pytest.mark.parametrize(("where", "inner", "deepest"), [
    ("event", "1", 255), ("event", '"s"', 255), ("event", "", 256), ("event", "{}", 255), ("event", '{"a":1}', 254),
    ("args", "1", 254), ("args", "", 255), ("args", '{"a":1}', 253)])
def test_depth_limit_in_skipped_values(where: str, inner: str, deepest: int) -> None:
    """Arrays nested around a number, a string, nothing or an object under a key not read (an event's, an args'):
    the scanner takes them up to its depth limit and refuses one level deeper (the pure-Python loader then reads
    the trace), at the same depth as before numbers and strings in a skipped array were read without a call."""
    for k in (deepest - 1, deepest, deepest + 1):
        value = "[" * k + inner + "]" * k
        if where == "event":
            event = _kernel(0).replace('"ph": "X"', f'"ph": "X", "queued": {value}')
        else:
            event = _kernel(0).replace('"device": 0', f'"device": 0, "grid": {value}')
        builder = native.NativeTableBuilder()
        if k <= deepest:
            assert builder.add_json(_array([event])) == 1
        else:
            with pytest.raises(native.NativeUnsupported):
                builder.add_json(_array([event]))


@pytest.mark.parametrize(("n", "change_at"), [(63, 0), (63, 62), (64, 1), (64, 63), (65, 64), (65, 65), (130, 64),
                                              (130, 65), (130, 128), (200, 0)])
def test_rows_staged_in_batches(tmp_path: Path, n: int, change_at: int) -> None:
    """Kernels in one chunk, more or fewer than a batch of staged rows (64), with their stream constant until
    event ``change_at`` and another after it (a column held as a constant run written out inside a batch, at its
    first or last row, or between two): the same tables as the reference."""
    events = [_kernel(i).replace('"stream": 7', f'"stream": {7 if i < change_at else 9}') for i in range(n)]
    assert_same(_trace(tmp_path, events))


@pytest.mark.parametrize("broken", ["cut", "duplicate"])
def test_chunk_failing_after_a_batch_leaves_the_columns_as_they_were(broken: str) -> None:
    """A chunk of 150 kernels (two batches of staged rows already in the columns) that fails at its last event,
    cut (not JSON) or with a duplicate key (not modelled): the builder holds what it held before the chunk."""
    import pickle

    good = _array([_kernel(i) for i in range(10)])
    events = [_kernel(i).replace('"stream": 7', f'"stream": {i}') for i in range(150)]
    if broken == "cut":
        bad, error = _array(events)[:-30], native.NativeSyntaxError
    else:
        events[-1] = events[-1].replace('"stream": 149', '"device": 1')
        bad, error = _array(events), native.NativeUnsupported
    a, b = native.NativeTableBuilder(), native.NativeTableBuilder()
    assert a.add_json(good) == b.add_json(good) == 10
    with pytest.raises(error):
        a.add_json(bad)
    assert a.add_json(good) == b.add_json(good) == 10
    assert pickle.dumps(a.exported()) == pickle.dumps(b.exported())


@pytest.mark.parametrize("cat", ["kernel", "cpu_op", "cuda_runtime", "user_annotation"])
@pytest.mark.parametrize("where", ["alone", "after named events"])
def test_a_kept_event_without_a_name(tmp_path: Path, cat: str, where: str) -> None:
    """An event of a kept family with no ``name`` key takes the empty name (msgspec's default) as the pure-Python
    loader does. The scanner once read 16 bytes at the default's static empty slice for it, a dangling pointer:
    the process died (SIGSEGV) on a fuzzed trace (tests/hostile/test_fuzz.py) with one such event."""
    nameless = f'{{"ph":"X","cat":"{cat}","pid":1,"tid":2,"ts":5.5,"dur":0.5,"args":{{"External id":3}}}}'
    events = ([_kernel(i) for i in range(20)] if where != "alone" else []) + [nameless]
    assert_same(_trace(tmp_path, events))
