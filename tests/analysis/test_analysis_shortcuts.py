"""The analysis' shortcuts (no Python object per row, counting instead of sorting) give exactly what
the plain pandas/numpy expressions they replaced give: each is checked against that expression, on random values
and on a committed trace's columns."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from phaseprof.analysis.attribution import attribute_items
from phaseprof.analysis.attribution_types import Method
from phaseprof.analysis.breakdown import _label_ids, _per_step_views, _unique
from phaseprof.analysis.items import (Coded, bucket_column, coded_str_categorical, cpu_items, gpu_items,
                                      kernel_view_codes, op_module_codes, op_modules, str_categorical)
from phaseprof.analysis.modules import build_module_tree
from phaseprof.analysis.steps import detect_steps
from phaseprof.analysis.window import HostCalls
from phaseprof.classify.buckets import Bucket
from phaseprof.classify.classifier import module_bucket_of_op
from phaseprof.columns import buckets
from phaseprof.classify.rules import load_rules
from phaseprof.trace.correlate import _launches, correlate
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
        # ids in call order increasing (the rule in real traces: no sort), with calls without one (-1) among them
        inc = np.cumsum(rng.integers(1, 4 if trial % 2 else 10 ** 6, int(rng.integers(0, 200))))
        inc[rng.random(inc.size) < 0.1] = -1
        cases.append((inc, np.r_[rng.choice(inc, 50) if inc.size else [], rng.integers(-2, 400, 20)].astype(np.int64)))
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


def test_coded_str_categorical_is_str_categorical_of_the_column() -> None:
    """The module view / method as codes into labels give what the object column, stored in a frame, gave."""
    pool = np.array([*Bucket, *(b.value for b in Bucket), "Qwen3MoeAttention", "x", None, np.nan, ""], dtype=object)
    rng = np.random.default_rng(4)
    for _ in range(100):
        labels = pool[rng.integers(0, len(pool), int(rng.integers(1, 40)))]  # labels may repeat a value
        codes = rng.integers(0, len(labels), int(rng.integers(0, 400)))
        got = coded_str_categorical(codes, labels)
        want = str_categorical(pd.DataFrame({"c": labels[codes]})["c"])
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got.codes, want.codes)


def _attribution_by_objects(items: pd.DataFrame, t, c, rules, op_module: np.ndarray, device: str) -> pd.DataFrame:
    """``attribute_items`` without graph replays as it was before its codes: an object per item for
    the module view and the method, stored in the frame, then ``str_categorical`` (``prepare`` did that)."""
    tree = build_module_tree(t.modules, rules)
    n = len(items)
    kernel_view = items["kernel_bucket"].to_numpy().astype(object)
    if device == "gpu":
        launch = items["launch"].to_numpy()
        ok = launch >= 0
        op = np.where(ok, c.runtime_op[np.maximum(launch, 0)] if c.runtime_op.size else -1, -1)
        mod = tree.innermost(t.runtime)[np.maximum(launch, 0)] if not tree.empty else np.full(n, -1)
        mod = np.where(ok, mod, -1)
    else:
        op = items.index.to_numpy()
        mod = tree.innermost(t.ops)[op] if not tree.empty else np.full(n, -1)
    if not tree.empty:
        mod = np.where((mod >= 0) & pd.isna(tree.label[np.maximum(mod, 0)]), -1, mod)
    op_b = np.where(op >= 0, op_module[np.maximum(op, 0)] if op_module.size else None, None)
    has_op = ~pd.isna(op_b)
    has_mod = (mod >= 0) & ~has_op
    module = kernel_view.copy()
    method = np.empty(n, dtype=object)
    method.fill(Method.KERNEL_NAME.value)
    layer = np.full(n, -1, dtype=np.int64)
    codes, distinct = pd.factorize(op_b[has_op])
    module[has_op] = np.asarray([str(b) for b in distinct] or [""], dtype=object)[codes]
    method[has_op] = Method.OP_STACK.value
    if not tree.empty:
        module[has_mod] = tree.label[mod[has_mod]]
        method[has_mod] = Method.MODULE_TREE.value
        layer[mod >= 0] = tree.layer[mod[mod >= 0]]
    out = items.assign(module_bucket=module, attribution=method, layer=layer)
    out["module_bucket"] = str_categorical(out["module_bucket"])
    out["attribution"] = str_categorical(out["attribution"])
    return out


@pytest.mark.parametrize("rel", [
    "traces/h200/eager/20261130T094747Z-h200-qwen3.5-35b-a3b-decode-128in-32out/trace.json.gz",
    "traces/h200/hooks/eager-prefill-4096/trace.json.gz",
    "traces/cpu/vllm-own-stack/tiny-hybrid-eager-prefill64-decode1.pt.trace.json.gz",
    "traces/public-cut/b200_vllm_gptoss120b_eager_prefill_window.json.gz",
])
def test_items_and_attribution_codes_are_the_object_columns(rel: str) -> None:
    """``gpu_items``' bucket columns and ``attribute_items``' module view and method, built as codes, are the
    object expressions they replaced, on committed traces (with and without a module tree; GPU and CPU)."""
    t = load_tables(ROOT / rel)
    rules = load_rules()
    c = correlate(t)
    device = "gpu" if not t.gpu.empty else "cpu"
    kview = kernel_view_codes(t.gpu["name"], rules)
    kernel_buckets = kview.objects()
    det = detect_steps(ops=t.ops, runtime=t.runtime, gpu=t.gpu, gpu_launch=c.gpu_launch,
                       kernel_buckets=kernel_buckets)
    om = op_module_codes(t.ops, c.op_parent, rules)
    op_module = om.objects()
    if device == "gpu":
        items = gpu_items(t, c, det, rules, kview, om)
        # the object expressions gpu_items used
        launch = c.gpu_launch
        op = np.where(launch >= 0, c.runtime_op[np.maximum(launch, 0)] if c.runtime_op.size else -1, -1)
        module = np.where(op >= 0, op_module[np.maximum(op, 0)] if op_module.size else None, None)
        module = np.where(pd.isna(module), kernel_buckets, module).astype(object)
        rows = items["row"].to_numpy()
        for col, want in (("kernel_bucket", bucket_column(kernel_buckets)), ("module_bucket", bucket_column(module))):
            got = items[col].array
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got.codes, want.codes[rows])
    else:
        items = cpu_items(t, c, det, rules, om)
    got, _ = attribute_items(items, t, c, rules, om, device)
    want = _attribution_by_objects(items, t, c, rules, op_module, device)
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    assert (got["attribution"] != Method.KERNEL_NAME.value).any()  # some item took an op's or a module's label


def _op_modules_by_pointer_jumping(ops: pd.DataFrame, parent: np.ndarray, rules) -> np.ndarray:
    """``items.op_modules`` as it was before :class:`OpModules`: every op's bucket at once."""
    cats = ops["name"].cat.categories
    own_by_cat = [module_bucket_of_op(str(n), rules) for n in cats]
    values = list(dict.fromkeys(b for b in own_by_cat if b is not None))
    index = {b: i for i, b in enumerate(values)}
    own_code = np.asarray([index[b] if b is not None else -1 for b in own_by_cat], dtype=np.int32)
    val = own_code[ops["name"].cat.codes.to_numpy()] if len(ops) else np.zeros(0, dtype=np.int32)
    ptr = np.asarray(parent).astype(np.int32)
    todo = np.flatnonzero((val < 0) & (ptr >= 0))
    while todo.size:
        p = ptr[todo]
        val[todo] = val[p]
        ptr[todo] = ptr[p]
        todo = todo[(val[todo] < 0) & (ptr[todo] >= 0)]
    table = np.empty(len(values) + 1, dtype=object)
    for i, b in enumerate(values):
        table[i] = b
    return table[val]


@pytest.mark.parametrize("rel", [
    "traces/h200/eager/20261130T094747Z-h200-qwen3.5-35b-a3b-decode-128in-32out/trace.json.gz",
    "traces/cpu/vllm-own-stack/tiny-hybrid-eager-prefill64-decode1.pt.trace.json.gz",
    "traces/public-cut/b200_vllm_gptoss120b_eager_prefill_window.json.gz",
])
def test_op_modules_where_asked_are_every_ops(rel: str) -> None:
    """``OpModules.at`` (up the parents from the rows asked for, results kept between calls) gives what the
    whole-column pointer jumping gave, at any rows, asked in any order and more than once."""
    t = load_tables(ROOT / rel)
    rules = load_rules()
    parent = correlate(t).op_parent
    want = _op_modules_by_pointer_jumping(t.ops, parent, rules)
    assert pd.notna(want).any() and pd.isna(want).any()
    om = op_module_codes(t.ops, parent, rules)
    rng = np.random.default_rng(5)
    for _ in range(3):
        rows = rng.integers(-1, len(t.ops), 5000)
        got = om.at(rows)
        ref = np.where(rows >= 0, want[np.maximum(rows, 0)], None)
        np.testing.assert_array_equal(np.asarray(Coded(got, om.values).objects(), dtype=object), ref)
    fresh = op_module_codes(t.ops, parent, rules).objects()
    assert list(fresh) == list(want) and list(om.objects()) == list(want)
    assert list(op_modules(t.ops, parent, rules)) == list(want)


def test_per_step_views_is_the_pair_groupby() -> None:
    """``breakdown._per_step_views`` (one int64 key per (step, bucket)) is the groupby of the pair it replaced,
    to the last bit, also with items of no step (-1, ``--steps``) and buckets without a category (null)."""
    from phaseprof.analysis.pipeline import analyze

    def reference(items: pd.DataFrame) -> dict:
        out = {}
        for col in ("kernel_bucket", "module_bucket"):
            per: dict = {}
            if len(items):
                for (k, b), v in items.groupby(["step", col], observed=True)["share_ns"].sum().items():
                    per.setdefault(int(k), {})[str(b)] = float(v) * 1e-3
            out[col] = per
        return out

    items = analyze(TRACE).prepared.items
    rng = np.random.default_rng(6)
    odd = items.assign(step=np.where(rng.random(len(items)) < 0.1, -1, items["step"].to_numpy()))
    mb = odd["module_bucket"].array.copy()
    mb[rng.random(len(items)) < 0.1] = np.nan
    odd["module_bucket"] = mb
    for its in (items, odd, items.iloc[:0]):
        got, want = _per_step_views(its), reference(its)
        assert got == want
        assert [list(v) for v in got["module_bucket"].values()] == [list(v) for v in want["module_bucket"].values()]
    assert -1 in _per_step_views(odd)["kernel_bucket"]
