"""The declared columns (phaseprof.columns) are the columns the loader and the pipeline really produce, on
committed real traces (GPU and CPU), and the validator rejects frames that break the declaration."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from phaseprof import columns as C
from phaseprof.analysis.pipeline import analyze
from phaseprof.classify.buckets import Bucket

KINDS = frozenset(k.value for k in C.EventKind)


def check(frame: pd.DataFrame, table: C.Table) -> list[str]:
    """What is wrong with ``frame`` as a ``table`` (empty list: nothing). Checks the column names and order,
    each column's dtype, that ``kind`` and bucket values are known and that no row ends before it starts."""
    problems: list[str] = []
    if tuple(frame.columns) != table.names:
        return [f"{table.name}: columns {list(frame.columns)}, declared {list(table.names)}"]
    for col in table.columns:
        s = frame[col.name]
        if col.dtype == C.Dtype.CATEGORY:
            ok = isinstance(s.dtype, pd.CategoricalDtype)
        elif col.dtype == C.Dtype.BUCKET:
            ok = s.dtype == C.BUCKET_DTYPE and not s.isna().any()
        else:
            ok = s.dtype == np.dtype(col.dtype.value)
        if not ok:
            problems.append(f"{table.name}.{col.name}: dtype {s.dtype}, declared {col.dtype}")
    if "kind" in table.names and not set(frame["kind"].cat.categories) <= KINDS:
        problems.append(f"{table.name}.kind: unknown kinds {set(frame['kind'].cat.categories) - KINDS}")
    if "end_ns" in table.names and len(frame) and (frame["end_ns"] < frame["ts_ns"]).any():
        problems.append(f"{table.name}: rows ending before they start")
    return problems


def validate(frame: pd.DataFrame, table: Table) -> None:
    """Raise ValueError listing every problem ``check`` finds."""
    problems = check(frame, table)
    if problems:
        raise ValueError("; ".join(problems))


REPO = Path(__file__).resolve().parents[1]
TRACES = [REPO / "traces/cpu/tiny-hybrid-prefill128-decode8/trace.json.gz",
          *sorted((REPO / "traces/public-cut").glob("*.json.gz"))]


@pytest.fixture(scope="module", params=TRACES, ids=lambda p: p.name.split(".json")[0])
def analysed(request: pytest.FixtureRequest):
    return analyze(request.param)


def test_event_tables_match_their_declaration(analysed) -> None:
    t = analysed.tables
    for spec in C.EVENT_TABLES:
        assert check(getattr(t, spec.name), spec) == [], spec.name


def test_items_match_their_declaration(analysed) -> None:
    items = analysed.prepared.items
    assert len(items) and check(items, C.ITEMS) == []
    # Buckets stay typed end to end: the column only holds Bucket values.
    assert set(items["kernel_bucket"].cat.categories) == {b.value for b in Bucket}
    # ``row`` points at the source row: same name and start there.
    src = analysed.tables.gpu if analysed.prepared.device == "gpu" else analysed.tables.ops
    rows = items["row"].to_numpy()
    assert (src["ts_ns"].to_numpy()[rows] == items["ts_ns"].to_numpy()).all()
    assert (src["name"].astype(str).to_numpy()[rows] == items["name"].astype(str).to_numpy()).all()


def test_validator_rejects_what_breaks_the_declaration() -> None:
    items = analyze(TRACES[0]).prepared.items
    validate(items, C.ITEMS)
    with pytest.raises(ValueError, match="columns"):
        validate(items.assign(pos=0.0), C.ITEMS)  # an ad-hoc column
    with pytest.raises(ValueError, match=r"items\.share_ns: dtype"):
        validate(items.assign(share_ns=items["share_ns"].astype(np.int64)), C.ITEMS)
    with pytest.raises(ValueError, match=r"items\.kernel_bucket"):
        validate(items.assign(kernel_bucket="not-a-bucket"), C.ITEMS)
    bad = items.copy()
    bad.loc[bad.index[0], "end_ns"] = bad["ts_ns"].iloc[0] - 1
    with pytest.raises(ValueError, match="ending before"):
        validate(bad, C.ITEMS)


def test_every_column_is_documented() -> None:
    for spec in (*C.EVENT_TABLES, C.ITEMS):
        assert len(set(spec.names)) == len(spec.names)
        for col in spec.columns:
            assert col.doc and (col.unit == "ns") == col.name.endswith("_ns"), (spec.name, col.name)
