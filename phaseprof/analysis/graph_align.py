"""CUDA/HIP-graph replay attribution: give replayed kernels the modules of the run that recorded them.

Under replay every kernel of a graph correlates to one ``cudaGraphLaunch``: its op stack and module tree say only
where the graph was launched. The same kernels, in the same order, appear where the graph was made:

- a *capture* window (``*StreamBeginCapture`` .. ``*StreamEndCapture`` on one thread), whose launch calls carry the
  kernel name in ``args.kernel`` on ROCm (the kernels themselves do not run while captured);
- an *eager* forward pass of the same model (vLLM warms each capture size up eagerly before capturing it).

Each step's work, in launch order (a graph's kernels in GPU order at their launch; piecewise graphs and the eager
ops between them interleave), is aligned by name with the reference segment sharing the most kernels with it
(``difflib.SequenceMatcher`` matching blocks: order kept, insertions and deletions allowed, as TraceLens's greedy
forward scan; memcpy/memset match any memcpy/memset). Replayed kernels, and kernels with no module evidence of
their own (launched inside torch.compile's opaque ``GraphModule``), take the paired reference kernel's module-view
label and layer where the reference has one; the rest are left to :mod:`phaseprof.analysis.bracket` (what lies
between attributed kernels) and otherwise keep the kernel-name fallback.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from difflib import SequenceMatcher

import numpy as np
import pandas as pd

from phaseprof.analysis.modules import ModuleTree
from phaseprof.defaults import GRAPH_LAUNCH_APIS, LAUNCH_APIS
from phaseprof.trace.correlate import Correlated
from phaseprof.trace.tables import EventTables, labels

_MEMCPY, _MEMSET = "<memcpy>", "<memset>"


@dataclass(frozen=True)
class Segment:
    """One reference kernel sequence, in launch order, with each kernel's attribution."""

    source: str  # "capture" | "eager"
    names: tuple[str, ...]  # kernel names (memcpy/memset as one token each)
    label: tuple[str, ...]  # module-view label per kernel
    layer: tuple[int, ...]  # decoder layer per kernel, -1 outside layers
    matched: tuple[bool, ...]  # whether the label came from a module/op rule or module tree (not a name fallback)


#: A reference run for alignment: its kernel sequences, its file name, and its decoder layers' types.
Reference = tuple[list["Segment"], str, dict[int, str]]


@dataclass(frozen=True)
class Alignment:
    """Per item of the replay: aligned label/layer (None/-1 where not aligned), and what was done."""

    label: np.ndarray  # object, None where not aligned
    layer: np.ndarray  # int64
    detail: str
    counts: dict[str, int] = field(default_factory=dict)  # replayed, wanted, paired, replayed_paired, with_module


def _token(name: str, kind: str) -> str:
    if kind == "memcpy" or name.startswith("Memcpy"):
        return _MEMCPY
    if kind == "memset" or name.startswith("Memset"):
        return _MEMSET
    return name


def reference_segments(t: EventTables, c: Correlated, *, op_label: np.ndarray, tree: ModuleTree,
                       kernel_bucket_of: dict[str, str]) -> list[Segment]:
    """Capture windows (launch calls with kernel names) and eager forward passes (kernels launched directly,
    one segment per outermost module call) of ``t``. ``op_label``: module-view bucket of each op (None where no
    rule names it or an enclosing op); ``kernel_bucket_of``: kernel-view bucket by name, for the fallback."""
    rt = t.runtime
    segs: list[Segment] = []
    if rt.empty:
        return segs
    names = labels(rt["name"])
    kernel = labels(rt["launched_kernel"])
    rts = rt["ts_ns"].to_numpy()
    rt_mod = tree.innermost(rt)
    rt_op = c.runtime_op

    def attrib(rows: np.ndarray, knames: list[str]) -> tuple[tuple[str, ...], tuple[int, ...], tuple[bool, ...]]:
        lab, lay, ok = [], [], []
        for r, k in zip(rows.tolist(), knames):
            o = rt_op[r]
            m = rt_mod[r]
            if o >= 0 and op_label[o] is not None:
                lab.append(str(op_label[o])); ok.append(True)
            elif m >= 0 and tree.label[m] is not None:
                lab.append(str(tree.label[m])); ok.append(True)
            else:
                lab.append(kernel_bucket_of.get(k, "unknown")); ok.append(False)
            lay.append(int(tree.layer[m]) if m >= 0 else -1)
        return tuple(lab), tuple(lay), tuple(ok)

    begins = np.flatnonzero(np.char.endswith(names.astype(str), "StreamBeginCapture"))
    ends = np.flatnonzero(np.char.endswith(names.astype(str), "StreamEndCapture"))
    is_launch = np.isin(names, list(LAUNCH_APIS - GRAPH_LAUNCH_APIS))
    for b in begins.tolist():
        later = ends[rts[ends] > rts[b]]
        if later.size == 0:
            continue
        e = int(later[np.argmin(rts[later])])
        rows = np.flatnonzero(is_launch & (rts > rts[b]) & (rts < rts[e]))
        rows = rows[np.argsort(rts[rows], kind="stable")]
        if rows.size == 0:
            continue
        kn = [_token(kernel[r] or names[r], "memcpy" if "Memcpy" in names[r] else
                     ("memset" if "Memset" in names[r] else "kernel")) for r in rows.tolist()]
        if all(k in LAUNCH_APIS for k in kn):  # no kernel names recorded: nothing to align by
            continue
        lab, lay, ok = attrib(rows, kn)
        segs.append(Segment("capture", tuple(kn), lab, lay, ok))
    segs += _eager_segments(t, c, tree=tree, rt_mod=rt_mod, attrib=attrib)
    return segs


def _eager_segments(t: EventTables, c: Correlated, *, tree: ModuleTree, rt_mod: np.ndarray, attrib) -> list[Segment]:
    """Kernels launched directly (not by a graph launch) inside each outermost module call."""
    if tree.empty or t.gpu.empty:
        return []
    g = t.gpu
    launch = c.gpu_launch
    rt_names = labels(t.runtime["name"])
    direct = (launch >= 0) & ~np.isin(rt_names[np.maximum(launch, 0)], list(GRAPH_LAUNCH_APIS))
    if not direct.any():
        return []
    roots = np.flatnonzero(tree.parent < 0)
    # root call of each runtime row's innermost module
    root_of = np.arange(len(tree.parent))
    par = tree.parent
    for _ in range(64):  # module trees are shallow; walk all rows up together
        nxt = np.where(par[root_of] >= 0, par[root_of], root_of)
        if np.array_equal(nxt, root_of):
            break
        root_of = nxt
    gi = np.flatnonzero(direct)
    m = rt_mod[launch[gi]]
    gi, m = gi[m >= 0], m[m >= 0]
    if gi.size == 0:
        return []
    seg_of = root_of[m]
    gnames = labels(g["name"])
    kinds = labels(g["kind"])
    gts = g["ts_ns"].to_numpy()
    out = []
    for r in roots.tolist():
        rows = gi[seg_of == r]
        if rows.size < 2:
            continue
        rows = rows[np.argsort(gts[rows], kind="stable")]
        kn = [_token(gnames[i], kinds[i]) for i in rows.tolist()]
        lab, lay, ok = attrib(launch[rows], kn)
        out.append(Segment("eager", tuple(kn), lab, lay, ok))
    return out


def launch_order(items: pd.DataFrame, t: EventTables) -> dict[int, np.ndarray]:
    """Each step's items in launch order: by their launch call's host time, then GPU start (a graph's kernels
    share one launch call and keep their GPU order; piecewise graphs and the eager ops between them interleave)."""
    launch = items["launch"].to_numpy()
    ts = items["ts_ns"].to_numpy()
    rts = t.runtime["ts_ns"].to_numpy() if len(t.runtime) else np.zeros(0, dtype=ts.dtype)
    host = np.where(launch >= 0, rts[np.maximum(launch, 0)] if rts.size else ts, ts)
    step = items["step"].to_numpy()
    order = np.lexsort((ts, host, step))
    cuts = np.flatnonzero(np.diff(step[order])) + 1
    return {int(step[g[0]]): g for g in np.split(order, cuts) if g.size}


def align_replay(items: pd.DataFrame, t: EventTables, segments: list[Segment], *, want: np.ndarray,
                 what: str) -> Alignment:
    """Align each step's work, in launch order (a graph's kernels in GPU order at its launch), with the
    reference segment sharing the most kernels with it; items in ``want`` (graph-replayed, or without module
    evidence of their own) take the paired reference kernel's label and layer."""
    n = len(items)
    label = np.full(n, None, dtype=object)
    layer = np.full(n, -1, dtype=np.int64)
    launch = items["launch"].to_numpy()
    rt = t.runtime
    rt_names = labels(rt["name"]) if len(rt) else np.zeros(0, dtype=object)
    is_graph = np.zeros(n, dtype=bool)
    if rt_names.size:
        is_graph = (launch >= 0) & np.isin(rt_names[np.maximum(launch, 0)], list(GRAPH_LAUNCH_APIS))
    n_replayed, n_want = int(is_graph.sum()), int(want.sum())
    if n_want == 0:
        return Alignment(label, layer, "nothing to align (every kernel has module evidence; no graph replay)")
    if not segments:
        return Alignment(label, layer, f"{n_replayed} graph-replayed kernels, no capture or eager reference in "
                         f"{what}: kernel-name fallback")
    names = labels(items["name"])
    kinds = labels(items["kind"])
    kview = items["kernel_bucket"].to_numpy().astype(object)
    order = launch_order(items, t)
    vocab: dict[str, int] = {}
    seg_codes = [[vocab.setdefault(x, len(vocab)) for x in s.names] for s in segments]
    seg_bags = [Counter(sc) for sc in seg_codes]
    aligned, paired, steps_done, replayed_paired = 0, 0, 0, 0
    step = items["step"].to_numpy()
    for k in np.unique(step[want]).tolist():
        rows = order[k]
        codes = [vocab.get(_token(names[i], kinds[i]), -1) for i in rows.tolist()]
        bag = Counter(c for c in codes if c >= 0)
        # the candidate sharing the most kernels (multiset overlap); ties: the closest in length
        best = max(range(len(segments)), key=lambda si: (sum((bag & seg_bags[si]).values()),
                                                          -abs(len(seg_codes[si]) - len(codes))))
        if not (bag & seg_bags[best]):
            continue
        codes = [c if c >= 0 else -1 - j for j, c in enumerate(codes)]  # unknown names never match
        seg = segments[best]
        steps_done += 1
        for a, j in pair_sequences(codes, seg_codes[best]):
            i = rows[a]
            if want[i]:
                paired += 1
                replayed_paired += int(is_graph[i])
                if seg.matched[j] and compatible(kview[i], seg.label[j]):
                    label[i], layer[i] = seg.label[j], seg.layer[j]
                    aligned += 1
    src = "/".join(sorted({s.source for s in segments}))
    detail = (f"{paired} of {n_want} kernels without module evidence ({n_replayed} graph-replayed) paired by "
              f"name and order, in {steps_done} step(s), with {len(segments)} {src} sequence(s) in {what}; "
              f"{aligned} took a module from it")
    return Alignment(label, layer, detail, {"replayed": n_replayed, "wanted": n_want, "paired": paired,
                                            "replayed_paired": replayed_paired, "with_module": aligned})


#: Kernel-view buckets that name a model component: a kernel whose name says it is one of these never takes a
#: different component from the alignment (a FlashAttention kernel did not run for the MoE block).
COMPONENTS = frozenset({"moe", "gdn", "attention", "norm", "sampling", "communication"})


def compatible(kernel_view: object, label: object) -> bool:
    k = str(kernel_view)
    return k not in COMPONENTS or k == str(label) or str(label) not in COMPONENTS


def pair_sequences(a: list[int], b: list[int]) -> list[tuple[int, int]]:
    """Index pairs (i, j), increasing in both, of equal codes in ``a`` and ``b``.

    Anchors first: a code occurring equally often in both (once per layer, twice per layer, ...) pairs its k-th
    occurrences (TraceLens's group-by-name positional match), keeping the pairs that stay in order. Between two
    consecutive anchors the rest is matched with ``SequenceMatcher`` on that stretch only, so a layer whose
    kernels differ (torch.compile fuses what eager runs as several kernels) cannot shift the pairing of the
    layers after it."""
    ca, cb = Counter(a), Counter(b)
    anchor_codes = {c for c, n in ca.items() if c >= 0 and cb.get(c) == n}
    pos_b: dict[int, list[int]] = {}
    for j, c in enumerate(b):
        if c in anchor_codes:
            pos_b.setdefault(c, []).append(j)
    seen: Counter[int] = Counter()
    anchors: list[tuple[int, int]] = []
    for i, c in enumerate(a):
        if c in anchor_codes:
            j = pos_b[c][seen[c]]
            seen[c] += 1
            if not anchors or j > anchors[-1][1]:
                anchors.append((i, j))
    out: list[tuple[int, int]] = []
    prev = (-1, -1)
    for i1, j1 in [*anchors, (len(a), len(b))]:
        i0, j0 = prev
        if i1 - i0 > 1 and j1 - j0 > 1:
            sub = SequenceMatcher(None, a[i0 + 1:i1], b[j0 + 1:j1], autojunk=False).get_matching_blocks()
            out += [(i0 + 1 + blk.a + d, j0 + 1 + blk.b + d) for blk in sub for d in range(blk.size)]
        if i1 < len(a):
            out.append((i1, j1))
        prev = (i1, j1)
    return out
