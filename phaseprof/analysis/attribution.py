"""Module-view attribution of work items, and its per-phase summary (coverage by method, per-layer times).

Order of evidence for an item's module view (first that applies):

1. ``op_stack``: a ``[[module]]`` rule names the launching op or an enclosing op (``vllm::moe_forward``).
2. ``module_tree``: the innermost ``nn.Module`` call around the launch (:mod:`phaseprof.analysis.modules`).
3. ``graph_alignment``: a graph-replayed kernel aligned with its capture / eager run
   (:mod:`phaseprof.analysis.graph_align`). For replayed kernels 1 and 2 are skipped: the stack around a
   ``cudaGraphLaunch`` says where the graph was launched, not what its kernels ran for.
4. ``structural``: a graph-replayed kernel placed by the model's layer plan (config) in the replay's own
   structure (:mod:`phaseprof.analysis.structural`); used when no reference run or capture window is at hand,
   and computed beside the alignment as its cross-check when one is.
5. ``bracketed``: no evidence of its own, but launched between attributed kernels: their layer and, where the
   model's structure makes it unambiguous, their module (:mod:`phaseprof.analysis.bracket`; after alignment only).
6. ``kernel_name``: the kernel view.

Columns this adds to the work items (``Prepared.items``):

- ``attribution`` (str, a :class:`Method`): which of the above gave ``module_bucket``.
- ``layer`` (int64): decoder layer index the item ran in, -1 when outside layers or unknown.
``module_bucket`` is overwritten with the result (unchanged for traces without module events or graph replay).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from phaseprof.analysis.attribution_types import (ATTRIBUTION_VERSION, Attribution, InferredPhase, LayerRow,
                                                  Method, PhaseAttribution)
from phaseprof.analysis.bracket import BracketCounts, bracket_step, is_boundary
from phaseprof.analysis.items import OpModules, coded_str_categorical, str_categorical
from phaseprof.analysis.grouped import group_sums, rows_in_steps
from phaseprof.analysis.graph_align import (Reference, Segment, compatible, align_replay, launch_order,
                                            reference_segments)
from phaseprof.analysis.layer_plan import LayerPlan
from phaseprof.analysis.modules import ModuleTree, build_module_tree, load_layer_rules, module_classes
from phaseprof.analysis.structural import structural
from phaseprof.classify.classifier import kernel_bucket
from phaseprof.classify.rules import RuleSet
from phaseprof.defaults import GRAPH_LAUNCH_APIS
from phaseprof.trace.correlate import Correlated
from phaseprof.trace.tables import EventTables, label_in

_US = 1e-3
_METHODS = np.asarray([m.value for m in Method], dtype=object)
_HOW = {m: np.int8(i) for i, m in enumerate(Method)}


@dataclass(frozen=True)
class ItemAttribution:
    """What :func:`attribute_items` found besides the item columns."""

    tree: ModuleTree
    graph_alignment: str
    alignment_counts: dict[str, int] = field(default_factory=dict)
    layer_types: dict[int, str] = field(default_factory=dict)  # this trace's, else the reference run's
    notes: tuple[str, ...] = ()  # what structural attribution left alone or found contradicting the config


def graph_reference(t: EventTables, c: Correlated, rules: RuleSet, op_module: np.ndarray,
                    tree: ModuleTree) -> list[Segment]:
    """Reference kernel sequences (capture windows, eager forward passes) of one trace."""
    return reference_segments(t, c, op_label=op_module, tree=tree,
                              kernel_bucket_of=_KernelBuckets(rules))


class _KernelBuckets(dict):
    """name -> kernel-view bucket, computed on first use."""

    def __init__(self, rules: RuleSet) -> None:
        super().__init__()
        self._rules = rules

    def __missing__(self, name: str) -> str:
        b = str(kernel_bucket(name, self._rules))
        self[name] = b
        return b

    def get(self, name: str, default: str | None = None) -> str:  # type: ignore[override]
        return self[name]


def attribute_items(items: pd.DataFrame, t: EventTables, c: Correlated, rules: RuleSet, op_module: OpModules,
                    device: str, *, reference: Reference | None = None, plan: LayerPlan | None = None,
                    plan_note: str = "") -> tuple[pd.DataFrame, ItemAttribution]:
    """Add ``attribution`` and ``layer`` to ``items`` and recompute ``module_bucket`` (see module docstring).
    ``reference``: segments of another trace (a capture run) and its name, for graph-replay alignment.
    ``plan``: the model's layer plan, for structural attribution (``plan_note``: why there is none)."""
    tree = build_module_tree(t.modules, rules)
    n = len(items)
    if device == "gpu":
        launch = items["launch"].to_numpy()
        ok = launch >= 0
        op = np.where(ok, c.runtime_op[np.maximum(launch, 0)] if c.runtime_op.size else -1, -1)
        replayed = ok & label_in(t.runtime["name"], GRAPH_LAUNCH_APIS)[np.maximum(launch, 0)] if len(t.runtime) \
            else np.zeros(n, dtype=bool)
        # (no runtime calls at all, a cut or broken trace: no launch to look up, and no row 0 to index)
        mod = tree.innermost(t.runtime)[np.maximum(launch, 0)] if not tree.empty and len(t.runtime) \
            else np.full(n, -1)
        mod = np.where(ok, mod, -1)
    else:
        op = items.index.to_numpy()
        replayed = np.zeros(n, dtype=bool)
        mod = tree.innermost(t.ops)[op] if not tree.empty else np.full(n, -1)
    if not tree.empty:  # opaque containers (torch.compile) give no module-tree label
        mod = np.where((mod >= 0) & pd.isna(tree.label[np.maximum(mod, 0)]), -1, mod)
    own = op_module.at(op)
    has_op = (own >= 0) & ~replayed
    has_mod = (mod >= 0) & ~has_op & ~replayed
    # The module view and the method as codes (an object per item, converted to pandas strings and back,
    # was a fifth of the analysis at 2.1 GB): ``labels[code]`` is the kernel view's bucket (its last slot: none),
    # then each op bucket's name, then each module call's label; ``how`` indexes ``_METHODS``.
    kcat = items["kernel_bucket"].array
    labels = [np.append(np.asarray(kcat.categories, dtype=object), np.nan),
              np.asarray([str(b) for b in op_module.values], dtype=object)]
    code = kcat.codes.astype(np.int32)
    code[code < 0] = len(labels[0]) - 1
    how = np.full(n, _HOW[Method.KERNEL_NAME], dtype=np.int8)
    layer = np.full(n, -1, dtype=np.int64)
    code[has_op] = len(labels[0]) + own[has_op]
    how[has_op] = _HOW[Method.OP_STACK]
    if not tree.empty:
        code[has_mod] = len(labels[0]) + len(labels[1]) + mod[has_mod]
        labels.append(np.asarray(tree.label, dtype=object))
        how[has_mod] = _HOW[Method.MODULE_TREE]
        inside = (mod >= 0) & ~replayed
        layer[inside] = tree.layer[mod[inside]]
    detail, counts, notes = "no graph-replayed kernels", {}, ()
    types = {**(reference[2] if reference is not None else {}), **tree.layer_types}
    # steps the module tree did not cut into layers (no stacks, or torch.compile inlined the layers): the layer
    # plan places their kernels too, graph-replayed or not
    unplaced = device == "gpu" and n > 0 and not (layer >= 0).any()
    if not (replayed.any() or reference is not None or (unplaced and plan is not None)):
        if unplaced and plan_note and has_op.any():  # a model whose ops phaseprof knows (vLLM's), not any trace
            notes = (plan_note.replace("for graph replays", "for steps without module scopes"),)
        items = items.assign(module_bucket=coded_str_categorical(code, np.concatenate(labels)),
                             attribution=coded_str_categorical(how, _METHODS), layer=layer)
        return items, ItemAttribution(tree=tree, graph_alignment=detail, alignment_counts=counts,
                                      layer_types=types, notes=tuple(notes))
    # Graph replays: alignment, the layer plan and bracketing work on the labels themselves.
    kernel_view = items["kernel_bucket"].to_numpy().astype(object)
    module = np.concatenate(labels)[code]
    method = _METHODS[how]
    op_module = op_module.objects()
    # own capture windows always; eager forwards only from another trace (this trace's own eager steps
    # already carry their modules)
    segs = [s for s in graph_reference(t, c, rules, op_module, tree) if s.source == "capture"]
    st = None
    if plan is not None and (replayed.any() or unplaced):
        evidence = np.where(method == Method.KERNEL_NAME.value, None, module)
        s_layer, s_label, st = structural(launch_order(items, t), plan=plan, evidence=evidence,
                                          replayed=replayed, kview=kernel_view,
                                          boundary=is_boundary(items["name"], load_layer_rules()),
                                          rules=load_layer_rules(), known_layer=layer)
        notes = st.notes
    elif plan is None and plan_note and replayed.any():
        notes = (plan_note,)
    if not replayed.any() and reference is None and st is not None and st.steps_done == 0:
        items = items.assign(module_bucket=coded_str_categorical(code, np.concatenate(labels)),
                             attribution=coded_str_categorical(how, _METHODS), layer=layer)
        return items, ItemAttribution(tree=tree, graph_alignment=f"no graph-replayed kernels; {st.detail(plan)}",
                                      alignment_counts=counts, layer_types=types, notes=tuple(notes))
    if segs or reference is not None or st is None or st.steps_done == 0:
        what = "this trace"
        if reference is not None:
            segs, what = segs + reference[0], f"this trace and {reference[1]}"
        want = replayed | (method == Method.KERNEL_NAME.value)
        al = align_replay(items, t, segs, want=want, what=what)
        hit = want & ~pd.isna(al.label)
        module[hit] = al.label[hit]
        method[hit] = Method.GRAPH_ALIGNMENT.value
        layer[hit] = al.layer[hit]
        bc = _bracket(items, t, module=module, method=method, layer=layer)
        detail = (f"{al.detail}; bracketed between attributed kernels: {bc.with_module} with their block's "
                  f"module, {bc.layer_only} with the layer only (kernel-name bucket), {bc.layer_added} more "
                  "given a layer")
        counts = {**al.counts, "bracketed_with_module": bc.with_module, "bracketed_layer_only": bc.layer_only,
                  "layer_added": bc.layer_added}
        if st is not None and st.steps_done:
            compared = want & ((method != Method.KERNEL_NAME.value) | (s_layer >= 0))
            agree = agreement(items, compared=compared, module=module, layer=layer, s_label=s_label,
                              s_layer=s_layer)
            detail += (f"; cross-check, {st.detail(plan)}: (layer, module) agree on {agree:.2f}% of the GPU "
                       "time either attributed")
            where = differences(items, compared=compared, module=module, layer=layer, s_label=s_label,
                                s_layer=s_layer)
            detail += f"; {where}" if where else ""
            counts["structural_agreement_bp"] = round(100 * agree)
        elif st is not None:
            detail += f"; {st.detail(plan)}"
    else:
        free = method == Method.KERNEL_NAME.value
        placed = s_layer >= 0
        named = free & ~pd.isna(s_label)  # in a layer, or the model's norm and LM head outside them
        module[named] = s_label[named]
        method[named] = Method.STRUCTURAL.value
        layer[placed & (layer < 0)] = s_layer[placed & (layer < 0)]
        detail = (f"{int(replayed.sum())} graph-replayed kernels, no capture or reference run: {st.detail(plan)}"
                  if replayed.any() else f"no graph replay, no module scopes in the layers: {st.detail(plan)}")
        counts = {"replayed": int(replayed.sum()), "structural_with_module": st.with_module,
                  "structural_layer_only": st.layer_only, "layer_added": st.layer_added}
        types = {**st.layer_types, **types}
    items = items.assign(module_bucket=module, attribution=method, layer=layer)
    # The module view names Bucket values or, for a module class no rule names, the class itself (never folded
    # into another bucket), so it is a free categorical, unlike the kernel view (columns.ITEMS).
    items["module_bucket"] = str_categorical(items["module_bucket"])
    items["attribution"] = str_categorical(items["attribution"])
    return items, ItemAttribution(tree=tree, graph_alignment=detail, alignment_counts=counts, layer_types=types,
                                  notes=tuple(notes))


def agreement(items: pd.DataFrame, *, compared: np.ndarray, module: np.ndarray, layer: np.ndarray,
              s_label: np.ndarray, s_layer: np.ndarray) -> float:
    """% of the GPU time of the ``compared`` items on which the structural result (``s_label``/``s_layer``;
    unplaced: no layer and the item's own label) and the final attribution name the same (layer, module-view
    bucket)."""
    share = items["share_ns"].to_numpy()
    own = np.where(pd.isna(s_label), module, s_label)
    same = (own.astype(str) == module.astype(str)) & (s_layer == layer)
    tot = float(share[compared].sum())
    return 100.0 * float(share[compared & same].sum()) / tot if tot else 100.0


def differences(items: pd.DataFrame, *, compared: np.ndarray, module: np.ndarray, layer: np.ndarray,
                s_label: np.ndarray, s_layer: np.ndarray, top: int = 3) -> str:
    """Where the structural result and the final attribution (arguments as for :func:`agreement`) differ, for
    the report: the GPU time (% of the compared items') on which only the layer differs and on which the module
    differs, each with its largest pairs (final vs layer plan). Empty when they agree everywhere."""
    share = items["share_ns"].to_numpy().astype(float)
    tot = float(share[compared].sum())
    own = np.where(pd.isna(s_label), module, s_label).astype(str)
    final = module.astype(str)
    where = {"layer": compared & (own == final) & (s_layer != layer), "module": compared & (own != final)}
    parts = []
    for what, mask in where.items():
        if not mask.any() or not tot:
            continue
        if what == "layer":
            a, b = (np.where(x[mask] < 0, "outside", "layer " + x[mask].astype(str)) for x in (layer, s_layer))
        else:
            a, b = final[mask], own[mask]
        by = pd.Series(share[mask]).groupby(pd.Series(a).str.cat(pd.Series(b), sep=" vs ")).sum()
        pairs = ", ".join(f"{k} {100.0 * v / tot:.2f}%" for k, v in by.nlargest(top).items())
        parts.append(f"the {what} of {int(mask.sum())} kernel(s), {100.0 * share[mask].sum() / tot:.2f}% "
                     f"(final vs layer plan: {pairs})")
    return "they differ on " + " and ".join(parts) if parts else ""


def _bracket(items: pd.DataFrame, t: EventTables, *, module: np.ndarray, method: np.ndarray,
             layer: np.ndarray) -> BracketCounts:
    """Bracket every step (analysis.bracket), in place: items with no evidence take method ``bracketed``."""
    free = method == Method.KERNEL_NAME.value
    label = np.where(free, None, module)
    kview = items["kernel_bucket"].to_numpy().astype(object)
    rules = load_layer_rules()
    boundary = is_boundary(items["name"], rules)
    total = BracketCounts()
    for rows in launch_order(items, t).values():
        done, bc = bracket_step(rows, label=label, layer=layer, unattributed=free, kview=kview, boundary=boundary,
                                compatible=compatible, rules=rules)
        module[done] = label[done]
        method[done] = Method.BRACKETED.value
        total = total + bc
    return total


def summarize(items: pd.DataFrame, phases: dict[str, set[int]], ia: ItemAttribution, *, mode: tuple[str, str],
              inferred: list[InferredPhase], dropped: int) -> Attribution:
    """Coverage by method and per-layer times for each phase (``phases``: phase -> its step indices)."""
    out = []
    # The phase's rows of the columns read, as arrays (a frame of them per phase, its selection by a hash
    # of every row's step, and a groupby of a categorical were most of this at 2.1 GB); each sum below is the
    # pandas sum it was, over the same values in the same order.
    step, share, layer = (items[c].to_numpy() for c in ("step", "share_ns", "layer"))
    how = items["attribution"].astype("category").array  # a categorical already (attribute_items): as it is
    how_code = np.asarray(how.codes)
    slot = {str(c): i for i, c in enumerate(how.categories)}
    for phase, steps in phases.items():
        mine = rows_in_steps(step, steps)
        sub_share = share[mine]
        busy = float(pd.Series(sub_share, copy=False).sum())
        cov = group_sums(sub_share, how_code[mine], len(slot))  # 0.0 for a method no row took, as cov.get gave
        cov_us = {m.value: float(cov[slot[m.value]] if m.value in slot else 0.0) * _US for m in Method}
        cov_pct = {m: (100.0 * v / (busy * _US) if busy else 0.0) for m, v in cov_us.items()}
        rows = []
        sub_layer = layer[mine]
        inside = sub_layer >= 0
        if inside.any():
            in_layer = pd.DataFrame({"share_ns": sub_share[inside], "layer": sub_layer[inside],
                                     "module_bucket": items["module_bucket"].array[mine][inside]})
            per = in_layer.groupby(["layer", "module_bucket"])["share_ns"].sum()
            # one pass over the (layer, bucket) sums, sorted by layer: no per-layer groupby (40-odd layers, 2
            # phases: it was most of the per-layer view's cost); each layer's total sums the same values in the
            # same order as a per-layer Series.sum, so the numbers are the same to the last bit
            lay = per.index.get_level_values(0).to_numpy()
            names = [str(b) for b in per.index.get_level_values(1)]
            vals = per.to_numpy()
            cut = np.flatnonzero(np.diff(lay)) + 1
            for lo, hi in zip(np.r_[0, cut].tolist(), np.r_[cut, lay.size].tolist()):
                k, tot = int(lay[lo]), float(vals[lo:hi].sum())
                rows.append(LayerRow(layer=k, layer_type=ia.layer_types.get(k, "unknown"),
                                     time_us=tot * _US, share_pct=100.0 * tot / busy if busy else 0.0,
                                     by_bucket_us={names[j]: float(vals[j]) * _US for j in range(lo, hi)}))
        outside = float(pd.Series(sub_share[~inside], copy=False).sum()) * _US
        out.append(PhaseAttribution(phase=phase, coverage_us=cov_us, coverage_pct=cov_pct, layers=rows,
                                    outside_layers_us=outside))
    return Attribution(version=ATTRIBUTION_VERSION, module_calls=len(ia.tree.frame),
                       module_classes=module_classes(ia.tree), graph_alignment=ia.graph_alignment,
                       alignment_counts=dict(ia.alignment_counts), phases=out,
                       mode=mode[0], mode_evidence=mode[1], inferred_phases=inferred, empty_steps_dropped=dropped)
