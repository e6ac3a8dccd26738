"""The two trace readers against each other on mutated real traces: the native scanner either gives
exactly the pure-Python reader's outcome (the same tables, or the same one-line error) or refuses the trace
(``NativeUnsupported``), after which ``--reader auto`` reads it in pure Python and gives the reference's outcome.

The cases are ``test_fuzz.py``'s (fields set to other types, integers beyond int64, keys deleted, events dropped or
duplicated, deep nesting, truncation, flipped bytes, trailing data, gzip members). CI runs
``PHASEPROF_FUZZ_READER_EXAMPLES`` (default 60) derandomized cases; ``PHASEPROF_FUZZ_SEED`` as in ``test_fuzz.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, seed, settings

from phaseprof.errors import PhaseprofError
from phaseprof.trace import native
from phaseprof.trace.read import load_tables
from phaseprof.trace.readers import Reader
from phaseprof.trace.tables import EventTables

from ..native_build import scanner_or_skip
from ..trace.test_stream_loader import assert_same_tables
from .test_fuzz import SEED, Case, _case

EXAMPLES = int(os.environ.get("PHASEPROF_FUZZ_READER_EXAMPLES", "60"))


def _outcome(path: Path, reader: Reader) -> EventTables | str:
    try:
        return load_tables(path, reader=reader)
    except native.NativeUnsupported:
        raise
    except PhaseprofError as e:
        return f"{type(e).__name__}: {e}"


def _same(a: EventTables | str, b: EventTables | str) -> None:
    if isinstance(a, str) or isinstance(b, str):
        assert a == b
    else:
        assert_same_tables(a, b)
        assert (a.read_by.reader, b.read_by.reader) == ("native", "python") or a.read_by.reader == b.read_by.reader


@pytest.fixture(scope="module", autouse=True)
def _scanner(monkeypatch_module: pytest.MonkeyPatch) -> None:
    scanner_or_skip()
    monkeypatch_module.setenv("PHASEPROF_SPLIT_READ", "0")  # one process: the split read has its own tests


@pytest.fixture(scope="module")
def monkeypatch_module() -> pytest.MonkeyPatch:
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


@seed(SEED)
@settings(max_examples=EXAMPLES, deadline=None, derandomize=SEED == 0, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example,
                                 HealthCheck.function_scoped_fixture])
@given(_case().map(Case))
def test_native_gives_the_reference_outcome_or_refuses(tmp_path_factory: pytest.TempPathFactory, c: Case) -> None:
    base, _label, data = c
    path = tmp_path_factory.mktemp("fuzz-readers") / f"{base}.json.gz"
    path.write_bytes(data)
    try:
        reference = _outcome(path, Reader.PYTHON)
        try:
            scanned = _outcome(path, Reader.NATIVE)
        except native.NativeUnsupported:
            auto = _outcome(path, Reader.AUTO)
            _same(auto, reference)
            assert isinstance(auto, str) or "gave up on this trace" in auto.read_by.why
            return
        _same(scanned, reference)
    finally:
        path.unlink()
