"""Do two captures of the same request record the same module tree? (``--hierarchy hooks`` vs ``stack``)

Same tree = the same module calls (``nn.Module: Class_N``: class and instance number) with the same parent call,
in the same start order on their thread. Same attribution = per phase, every module-view bucket holds the same
number of work items, and each work item (the same op at the same position) the same bucket and decoder layer
(``agree_pct``, weighted by time). Bucket shares (percent of the phase's busy time) differ by the two runs'
timing noise (one profiled request each): ``max_share_diff_pct`` says by how much.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from phaseprof.analysis.modules import build_module_tree, module_names
from phaseprof.analysis.pipeline import AnalysedTrace, analyze
from phaseprof.trace.tables import labels


@dataclass(frozen=True)
class TreeSide:
    """One trace's tree: (call, parent call or "") in start order; decoder layers; module view per phase
    (bucket -> work items, bucket -> share of the phase's busy time in percent)."""

    calls: tuple[tuple[str, str], ...]
    layers: tuple[int, ...]
    items: dict[str, dict[str, int]]
    share_pct: dict[str, dict[str, float]]
    #: per work item in step and start order: (name, module-view bucket, decoder layer), and its time share (ns)
    item_views: tuple[tuple[str, str, int], ...] = ()
    item_ns: tuple[int, ...] = ()


@dataclass(frozen=True)
class TreeComparison:
    a: TreeSide
    b: TreeSide
    first_difference: str | None  # the first call that differs, None when the trees are the same

    @property
    def same_tree(self) -> bool:
        return self.first_difference is None

    @property
    def same_items(self) -> bool:
        """Every phase's module-view buckets hold the same numbers of work items in both."""
        return self.a.items == self.b.items

    @property
    def agree_pct(self) -> float | None:
        """Percent of a's work-item time whose item (the same op at the same position) got the same module-view
        bucket and decoder layer in b: independent of the two runs' timing noise. None when the two traces do
        not hold the same work items in the same order."""
        if [v[0] for v in self.a.item_views] != [v[0] for v in self.b.item_views]:
            return None
        total = sum(self.a.item_ns)
        same = sum(ns for va, vb, ns in zip(self.a.item_views, self.b.item_views, self.a.item_ns) if va == vb)
        return 100.0 * same / total if total else 100.0

    @property
    def max_share_diff_pct(self) -> float:
        """Largest |share a - share b| over phases and buckets, in percentage points."""
        diffs = [abs(self.a.share_pct[p].get(k, 0.0) - self.b.share_pct[p].get(k, 0.0))
                 for p in set(self.a.share_pct) | set(self.b.share_pct)
                 for k in set(self.a.share_pct.get(p, {})) | set(self.b.share_pct.get(p, {}))
                 if p in self.a.share_pct and p in self.b.share_pct]
        return max(diffs, default=0.0)


def tree_side(trace: AnalysedTrace) -> TreeSide:
    """The module tree and module view of an analysed trace."""
    tree = build_module_tree(trace.tables.modules, trace.rules)
    names = module_names(tree)
    frame = tree.frame
    order = np.lexsort((-(frame["end_ns"].to_numpy() - frame["ts_ns"].to_numpy()), frame["ts_ns"].to_numpy())) \
        if len(frame) else np.zeros(0, dtype=np.int64)
    calls = tuple((str(names[i]), "" if tree.parent[i] < 0 else str(names[tree.parent[i]])) for i in order)
    phases = trace.breakdown.phases
    items = trace.prepared.items.sort_values(["step", "ts_ns"], kind="stable")
    views = tuple(zip(labels(items["name"]).tolist(), labels(items["module_bucket"]).tolist(),
                      items["layer"].astype(int).tolist()))
    return TreeSide(calls=calls, layers=tuple(sorted(tree.layer_types)),
                    items={p.phase: {b.bucket: b.count for b in p.module_view} for p in phases},
                    share_pct={p.phase: {b.bucket: b.share_pct for b in p.module_view} for p in phases},
                    item_views=views, item_ns=tuple(items["share_ns"].astype(int).tolist()))


def compare_trees(a: str | Path | AnalysedTrace, b: str | Path | AnalysedTrace) -> TreeComparison:
    """Compare the module trees and module views of two traces (paths or analysed traces)."""
    sa, sb = (tree_side(t if isinstance(t, AnalysedTrace) else analyze(t)) for t in (a, b))
    diff = None
    for k, (ca, cb) in enumerate(zip(sa.calls, sb.calls)):
        if ca != cb:
            diff = f"call {k}: {ca[0]} in {ca[1] or 'nothing'} vs {cb[0]} in {cb[1] or 'nothing'}"
            break
    if diff is None and len(sa.calls) != len(sb.calls):
        diff = f"{len(sa.calls)} vs {len(sb.calls)} module calls"
    return TreeComparison(a=sa, b=sb, first_difference=diff)
