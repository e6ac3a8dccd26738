"""Bracketed attribution: a kernel with no module evidence of its own takes its layer (and, where it is not
ambiguous, its module) from the attributed kernels around it in its step's launch order.

Graph alignment pairs kernels by name; what torch.compile fused into new ``triton_*`` kernels, or what picked a
different GEMM tile than the reference run, has no partner. Such a kernel still ran *between* two attributed
kernels, and a model's layers run one after the other:

- between two kernels of the same layer it ran in that layer; between a kernel of layer i and one of layer i+1
  it ran in layer i before the *boundary* kernel that opens layer i+1 and in layer i+1 from it on (boundary
  kernels, ``layers.toml`` ``[boundary]``: the fused residual add + RMSNorm before each block; which one opens
  the layer follows from the blocks on both sides, see ``_opening``); after the last layer, before that boundary
  kernel (the model's final norm), in the last layer;
- its module-view label is the block both neighbours (in its layer) name, or, with a boundary kernel between
  them, the block on its side of it; anything else (the boundary kernel itself, a stretch with two different
  blocks and no boundary, a kernel whose name says it is another component) keeps its kernel-name bucket: no
  module is invented.

Kernels already attributed by an op rule but outside any layer (vLLM's custom ops run between piecewise graphs)
get the layer only; their label and method stay.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from phaseprof.analysis.modules import LayerRules


@dataclass(frozen=True)
class BracketCounts:
    """Kernels bracketed: with a neighbouring block's module, with only the layer (label from the kernel name);
    and kernels attributed otherwise that only gained their layer."""

    with_module: int = 0
    layer_only: int = 0
    layer_added: int = 0

    def __add__(self, o: BracketCounts) -> BracketCounts:
        return BracketCounts(self.with_module + o.with_module, self.layer_only + o.layer_only,
                             self.layer_added + o.layer_added)


def is_boundary(names: pd.Series | np.ndarray, rules: LayerRules) -> np.ndarray:
    """Whether each kernel name opens a block, checked once per distinct name (categories: C++ kernel names run
    to a thousand characters, too long to sort as fixed-width strings)."""
    cat = pd.Series(names).astype("category").cat
    flags = np.fromiter((rules.is_boundary(str(c)) for c in cat.categories), dtype=bool, count=len(cat.categories))
    codes = cat.codes.to_numpy()
    return np.where(codes >= 0, flags[np.maximum(codes, 0)], False) if flags.size else np.zeros(codes.size, bool)


def _opening(left: object, right: object, n: int, rules: LayerRules | None) -> int | None:
    """Which of the ``n`` boundary kernels between a kernel of layer i (block ``left``) and one of layer i+1
    (block ``right``) opens layer i+1, or None when the structure does not say.

    A decoder layer runs norm, mixer (gdn / attention), norm, feed-forward (moe): after a mixer kernel one
    boundary (the post-attention norm) still belongs to layer i; before a feed-forward kernel one (that norm)
    already belongs to layer i+1. Without known blocks on both sides only a single boundary is unambiguous."""
    mixer, ffn = (rules.mixer_buckets, rules.ffn_buckets) if rules is not None else ((), ())
    owe_left = 1 if left in mixer else 0 if left in ffn else None
    owe_right = 1 if right in ffn else 0 if right in mixer else None
    if owe_left is None or owe_right is None:
        return 0 if n == 1 else None
    return owe_left if n == owe_left + 1 + owe_right else None


def bracket_step(rows: np.ndarray, *, label: np.ndarray, layer: np.ndarray, unattributed: np.ndarray,
                 kview: np.ndarray, boundary: np.ndarray, compatible,
                 rules: LayerRules | None = None) -> tuple[np.ndarray, BracketCounts]:
    """Bracket the items ``rows`` (one step, in launch order), writing ``label`` and ``layer`` in place.
    ``label``: module-view label, None where unknown; ``unattributed``: items with no module evidence (their
    label may be overwritten); ``compatible(kernel_view, label)``: whether a kernel may take that label;
    ``rules``: the mixer and feed-forward buckets (``layers.toml``) that place a layer's boundary kernels.
    Returns the items that were bracketed (rows) and the counts."""
    lab = label[rows]
    lay = layer[rows]
    b = boundary[rows]
    free = unattributed[rows]
    known = ~pd.isna(lab) & ~free
    new = lay.copy()
    anchors = np.flatnonzero(lay >= 0)
    for p, q in zip(anchors[:-1].tolist(), anchors[1:].tolist()):
        if q - p < 2:
            continue
        a, c = int(lay[p]), int(lay[q])
        if a == c:  # layers run one after the other: all between two kernels of one layer is that layer
            new[p + 1:q] = a
        elif c == a + 1:  # the next layer's input_layernorm splits the stretch
            bp = np.flatnonzero(b[p + 1:q]) + p + 1
            k = _opening(lab[p], lab[q], int(bp.size), rules)
            if k is not None:
                new[p + 1:bp[k]] = a
                new[bp[k]:q] = c
    tail = -1
    if anchors.size:  # after the last layer, before the first kernel of a module outside layers (the logits)
        p = int(anchors[-1])
        later = np.flatnonzero(known[p + 1:]) + p + 1
        if later.size:
            bp = np.flatnonzero(b[p + 1:later[0]]) + p + 1
            if bp.size == 1:
                new[p + 1:bp[0]] = lay[p]
                tail = int(bp[0])  # the model's final norm: outside layers, label from its name
    gained = (new >= 0) & (lay < 0)
    target = np.flatnonzero(free & (gained | (np.arange(rows.size) == tail)))
    added = int((gained & ~free).sum())
    if target.size == 0:
        layer[rows] = new
        return rows[:0], BracketCounts(layer_added=added)
    kpos = np.flatnonzero(known)
    nb = np.cumsum(b)  # boundary kernels at or before each position
    with_module = 0
    for i in target.tolist():
        kv = kview[rows[i]]
        out = str(kv)
        if not b[i]:
            j = np.searchsorted(kpos, i)
            left = int(kpos[j - 1]) if j > 0 else -1
            right = int(kpos[j]) if j < kpos.size else -1
            side_a = lab[left] if left >= 0 and new[left] == new[i] else None
            side_b = lab[right] if right >= 0 and new[right] == new[i] else None
            before = nb[i] - (nb[left] if left >= 0 else 0)  # boundaries between the left neighbour and i
            after = (nb[right - 1] if right >= 0 else nb[-1]) - nb[i]  # and between i and the right one
            if before == 0 and after == 0:
                pick = side_a if side_a is not None and side_a == side_b else None
            elif before == 0:
                pick = side_a
            elif after == 0:
                pick = side_b
            else:
                pick = None
            if pick is not None and compatible(kv, pick):
                out = str(pick)
                with_module += 1
        lab[i] = out
    label[rows[target]] = lab[target]
    layer[rows] = new
    return rows[target], BracketCounts(with_module=with_module, layer_only=int(target.size) - with_module,
                                       layer_added=added)
