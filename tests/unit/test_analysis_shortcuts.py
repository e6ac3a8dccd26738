"""The analysis' shortcuts (issue 28: no Python object per row, counting instead of sorting) give exactly what
the plain pandas/numpy expressions they replaced give: each is checked against that expression, on random values
and on a committed trace's columns."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from phaseprof.analysis.breakdown import _label_ids, _unique
from phaseprof.analysis.items import bucket_column, str_categorical
from phaseprof.analysis.window import HostCalls
from phaseprof.classify.buckets import Bucket
from phaseprof.columns import buckets
from phaseprof.trace.correlate import _launches
from phaseprof.trace.read import load_tables
from phaseprof.trace.tables import _constant_as_one, label_in, labels

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "traces/h200/eager/20261130T094747Z-h200-qwen3.5-35b-a3b-decode-128in-32out/trace.json.gz"


@pytest.fixture(scope="module")
def tables():
    return load_tables(TRACE)


def test_unique_is_np_unique() -> None:
    rng = np.random.default_rng(0)
    for trial in range(300):
        n = int(rng.integers(0, 3000))
        v = rng.integers(0, int(rng.integers(1, 20000)), n)
        if trial % 5 == 0 and n:
            v[0] = 10 ** 9  # a range far larger than the values: np.unique itself
        for kw in ({"inverse": True}, {"index": True, "counts": True}, {"index": True, "inverse": True}):
            got = _unique(v, **kw)
            want = np.unique(v, **{f"return_{k}": x for k, x in kw.items()})
            assert len(got) == len(want)
            for g, w in zip(got, want):
                np.testing.assert_array_equal(g, w, err_msg=f"trial {trial} {kw}")


def test_bucket_column_is_buckets() -> None:
    pool = np.array([*Bucket, *(b.value for b in Bucket), None, np.nan], dtype=object)
    rng = np.random.default_rng(1)
    for _ in range(100):
        v = pool[rng.integers(0, len(pool), int(rng.integers(0, 400)))]
        got, want = bucket_column(v), buckets(v)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got.codes, want.codes)
    bad = np.array(["not-a-bucket", Bucket.OTHER], dtype=object)
    with pytest.raises(ValueError) as got_error:
        bucket_column(bad)
    with pytest.raises(ValueError) as want_error:
        buckets(bad)
    assert str(got_error.value) == str(want_error.value)


def test_str_categorical_is_astype_str() -> None:
    pool = np.array([*Bucket, "Qwen3MoeAttention", "x", None, np.nan, ""], dtype=object)
    rng = np.random.default_rng(2)
    for _ in range(100):
        s = pd.Series(pool[rng.integers(0, len(pool), int(rng.integers(0, 400)))], dtype=object)
        got, want = str_categorical(s), pd.Categorical(s.astype(str))
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got.codes, want.codes)


def test_label_ids_and_host_calls(tables) -> None:
    for col in (tables.runtime["name"], tables.gpu["kind"], pd.Series(pd.Categorical(["a", None, "", "a"]))):
        ids, names = _label_ids(col)
        np.testing.assert_array_equal(names[ids], labels(col))
        assert len(set(names.tolist())) == len(names)  # equal labels share an index
    names = labels(tables.runtime["name"])
    got, want = HostCalls.of_ids(*_label_ids(tables.runtime["name"])), HostCalls.of(names)
    for field in ("kind", "is_launch", "is_sync", "is_malloc", "is_free"):
        np.testing.assert_array_equal(getattr(got, field), getattr(want, field))
    assert want.is_launch.any() and want.is_sync.any()


def test_label_in_is_isin(tables) -> None:
    cols = (tables.runtime["name"], tables.gpu["kind"], pd.Series(pd.Categorical(["a", None, "b"])),
            pd.Series(["a", "b", "c"], dtype=object))
    for col in cols:
        for names in ({"cudaLaunchKernel", "cudaGraphLaunch"}, ("kernel",), ("", "a"), ()):
            np.testing.assert_array_equal(label_in(col, names), np.isin(labels(col), list(names)))


def test_launches_is_first_row_reindex(tables) -> None:
    """``correlate._launches`` is the pandas lookup it replaced: the first runtime row with each correlation id."""
    def reference(corr: np.ndarray, g_corr: np.ndarray) -> np.ndarray:
        valid = corr >= 0
        lookup = pd.Series(np.flatnonzero(valid), index=corr[valid])
        lookup = lookup[~lookup.index.duplicated(keep="first")]
        out = lookup.reindex(g_corr).fillna(-1).to_numpy(dtype=np.int64).copy()
        out[g_corr < 0] = -1
        return out

    cases = [(tables.runtime["correlation"].to_numpy(), tables.gpu["correlation"].to_numpy())]
    rng = np.random.default_rng(3)
    for trial in range(100):
        top = 50 if trial % 2 else 10 ** 9  # dense ids (a table) and sparse ones (a search)
        corr = rng.integers(-2, top, int(rng.integers(0, 200)))
        g_corr = np.r_[rng.choice(corr, int(rng.integers(0, 100))) if corr.size else [], rng.integers(-2, top, 20)]
        cases.append((corr, g_corr.astype(np.int64)))
    for corr, g_corr in cases:
        np.testing.assert_array_equal(_launches(corr, g_corr), reference(corr, g_corr))


def test_constant_column_is_one_value() -> None:
    same = np.full(1000, -1, dtype=np.int64)
    one = _constant_as_one(same)
    np.testing.assert_array_equal(one, same)
    assert one.dtype == same.dtype and one.strides == (0,) and not one.flags.writeable
    varied = np.arange(1000)
    assert _constant_as_one(varied) is varied
    assert _constant_as_one(same[:1]) is not None and _constant_as_one(same[:0]).size == 0
