"""Structural attribution of graph replays: the model's layer plan takes the place of an eager reference run.

Under CUDA-graph replay a kernel's launch call says only which graph ran it. What the replay itself still shows
is the model's structure, in launch order (``graph_align.launch_order``):

- vLLM fuses each residual add into the RMSNorm after it (``layers.toml [boundary]``): layer i's
  ``post_attention_layernorm``, layer i+1's ``input_layernorm`` and, after the last layer, the model's ``norm``.
  A model of N layers shows 2N such kernels (layer 0's input norm has no residual to add, so it is a plain
  norm; 2N+1 where it is fused too): they cut the step into N mixer spans and N feed-forward spans.
- Layer 0's mixer span starts where its first mixer kernel (``gdn`` / ``attention`` in the kernel view or by
  op rule) stands as far in as in the next layer of its type (the same in_proj GEMMs and glue precede it), and
  no earlier than the step's first graph-replayed kernel (before it: the runner's input copies).
- Inside a layer: the opening and post-attention norms keep their kernel view (norm); a kernel whose name says
  it is a component (attention, MoE, GDN, norm, ...) keeps it; the rest take their span's block: the mixer
  the span shows (in_proj, conv glue and out_proj are the mixer's); in a feed-forward span ``moe`` where it
  runs MoE kernels (router, shared expert), else the dense MLP's bucket (``mlp``: gate_up GEMM, activation,
  down GEMM; the bucket the module tree gives ``LlamaMLP``, ``layers.toml [layer_type]``).

The plan is checked, never forced: a step whose boundary count does not fit the config's layer count is left
alone (the reason is reported); a layer whose kernels show another type than the config says keeps what its
kernels show, and the difference is reported.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from phaseprof.analysis.graph_align import COMPONENTS
from phaseprof.analysis.layer_plan import LayerPlan
from phaseprof.analysis.modules import LayerRules

#: The module-view label of the LM head GEMM placed by the step's structure: the class the module tree names.
LM_HEAD = "LogitsProcessor"


@dataclass(frozen=True)
class StructuralResult:
    """What structural attribution did over all steps: items given a module (and layer), items given only the
    layer (kernel-view label), items with other evidence that gained a layer; steps done / left alone."""

    with_module: int = 0
    layer_only: int = 0
    layer_added: int = 0
    steps_done: int = 0
    steps_left: int = 0
    layer_types: dict[int, str] = field(default_factory=dict)  # as the trace shows them
    notes: tuple[str, ...] = ()  # steps left alone and contradictions with the config, one line each

    def detail(self, plan: LayerPlan) -> str:
        return (f"structural (layer plan from {plan.source}: {plan.num_layers} layers): {self.steps_done} step(s) "
                f"cut into layers, {self.steps_left} left alone; {self.with_module} kernels given their block, "
                f"{self.layer_only} the layer only, {self.layer_added} more given a layer")


def structural_step(rows: np.ndarray, *, plan: LayerPlan, shown: np.ndarray, component: np.ndarray,
                    replayed: np.ndarray, boundary: np.ndarray, blocks: tuple[str, ...], gemm: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray, list[int], str | None, dict[int, str]]:
    """Layer and block for the items ``rows`` (one step, in launch order). ``shown``: per item, the index in
    ``blocks`` (the mixer buckets, then ``moe``) of the block its evidence or kernel view names, -1 for none;
    ``component``: whether its kernel view names a component (it keeps it). Returns, per row, the layer (-1
    outside) and the index of its block label in ``blocks`` (``len(blocks)``: the dense MLP, ``+ 1``: the model's
    norm, ``+ 2``: the LM head, both outside the layers, ``gemm`` saying which kernels are GEMMs; -1: keep its
    kernel view), the layers whose kernels
    contradict the plan's type, why the step was left alone (None when it was not) and the layer types the step shows."""
    m = rows.size
    layer = np.full(m, -1, dtype=np.int64)
    label = np.full(m, -1, dtype=np.int64)
    rep = np.flatnonzero(replayed[rows])
    # Graph replays: from the first replayed kernel on (before it: the runner's input copies). Torch.compile'd
    # without graphs (a batch above the largest capture size) or eager: the step's kernels as launched.
    start = int(rep[0]) if rep.size else 0
    where = "after the first graph-replayed kernel" if rep.size else "in the step"
    b = np.flatnonzero(boundary[rows])
    b = b[b >= start]
    n = plan.num_layers
    code = shown[rows]
    nb = len(blocks)
    if b.size == 2 * n + 1:  # layer 0's input norm is fused with an add too
        opening0, cuts = int(b[0]), b[1:]
    elif b.size == 2 * n:
        opening0, cuts = -1, b
    else:
        why = (f"{b.size} fused add-RMSNorm kernels {where}; the config's {n} layers need {2 * n}")
        anchored = anchor_layers(code, plan=plan, blocks=blocks, start=start)
        if isinstance(anchored, str):
            return layer, label, [], f"{why}, and {anchored}", {}
        layer[:] = anchored
        _name_lm_head(label, gemm[rows], after=int(np.flatnonzero(anchored >= 0)[-1]) + 1, code=nb + 2)
        types = {i: plan.layer_type(i) for i in range(n)}  # the anchors matched the plan's types exactly
        return layer, label, [], None, types
    counts = np.zeros((m + 1, nb), dtype=np.int64)  # kernels naming each block before each position
    counts[1:] = np.cumsum(code[:, None] == np.arange(nb)[None, :], axis=0)
    post, ends = cuts[0::2], cuts[1::2]  # post-attention norms; next layer's input norm (the last: model norm)
    opens = np.concatenate(([opening0 if opening0 >= 0 else start], ends[:-1]))
    mixer_in = (counts[post] - counts[opens])[:, :nb - 1] > 0  # layer x mixer bucket present
    mixer = np.where(mixer_in.any(axis=1), mixer_in.argmax(axis=1), -1)  # first in layers.toml order
    moe = (counts[ends] - counts[post + 1])[:, nb - 1] > 0
    if opening0 < 0:
        opens[0] = _layer0_start(code < nb - 1, code, start=start, opens=opens, post=post, mixer=mixer)
    pos = np.arange(int(opens[0]), int(ends[-1]))
    seg = np.searchsorted(np.stack([opens, post], axis=1).ravel(), pos, side="right") - 1
    lay, in_ffn = seg // 2, (seg % 2).astype(bool)
    layer[pos] = lay
    name = np.asarray([*blocks[:-1], "other"], dtype=object)
    types = {i: f"{name[mixer[i]]}+{'moe' if moe[i] else 'dense'}" for i in range(n)}
    notes = [i for i in range(n) if types[i] != plan.layer_type(i)]
    norm_at = np.zeros(m, dtype=bool)
    norm_at[opens] = True
    norm_at[post] = True
    block = np.where(in_ffn, np.where(moe, nb - 1, nb)[lay], mixer[lay])  # nb: the dense MLP
    label[pos] = np.where(norm_at[pos] | component[rows][pos], -1, block)
    final = int(ends[-1])  # the model's norm (the last layer's residual add fused into it): outside the layers
    label[final] = nb + 1
    _name_lm_head(label, gemm[rows], after=final + 1, code=nb + 2)
    return layer, label, notes, None, types


def _name_lm_head(label: np.ndarray, gemm: np.ndarray, *, after: int, code: int) -> None:
    """The first GEMM after the decoder layers (and the model's norm) is the LM head: vLLM's runner computes the
    logits (``LogitsProcessor``, the class the module tree names) right after the model's forward, before the
    sampler. In place; nothing when the step has no GEMM there."""
    at = np.flatnonzero(gemm[after:])
    if at.size:
        label[after + int(at[0])] = code


def anchor_layers(code: np.ndarray, *, plan: LayerPlan, blocks: tuple[str, ...], start: int) -> np.ndarray | str:
    """Layers of one step (items in launch order) from its anchors when no fused add-RMSNorm cuts it (eager
    models whose RMSNorm runs as plain ATen kernels, e.g. Gemma's): the kernels whose evidence or name says
    mixer (``gdn`` / ``attention``) or ``moe`` (``code``: index in ``blocks``, -1 none) come in runs, one per
    block, and a layer runs its mixer, then its MoE. The runs must follow the config's plan exactly (its
    mixers' order, a MoE block after each), as a contiguous stretch of the step's runs (vLLM launches some
    attention-metadata work before the first layer); layer i then ends after its MoE run's last kernel and the
    next begins there. Layer 0 begins as far before its first mixer kernel as the next layer of its type does.
    Needs MoE in every layer (a dense MLP has no anchor of its own: where one layer ends is not known). Returns
    the layer per item (-1 outside), or why not."""
    n = plan.num_layers
    if not all(f == "moe" for f in plan.ffns):
        return "no anchors close a dense layer (its MLP has none)"
    moe = len(blocks) - 1
    if any(mx not in blocks[:moe] for mx in plan.mixers):
        return "the plan names a mixer no anchor shows"
    want = np.asarray([c for mx in plan.mixers for c in (blocks.index(mx), moe)], dtype=np.int64)
    pos = np.flatnonzero(code >= 0)
    pos = pos[pos >= start]
    if pos.size == 0:
        return "no mixer or MoE anchors"
    seq = code[pos]
    first = np.flatnonzero(np.r_[True, seq[1:] != seq[:-1]])  # each run's first anchor (index into pos)
    last = np.r_[first[1:] - 1, seq.size - 1]
    runs = seq[first]
    k = want.size
    hits = [o for o in range(runs.size - k + 1) if np.array_equal(runs[o:o + k], want)]
    if not hits:
        return (f"its {runs.size} mixer/MoE anchor runs do not hold the config's {n} layers in order "
                "(mixer, then MoE, each layer)")
    o = hits[0]
    out = np.full(code.size, -1, dtype=np.int64)
    ends = pos[last[o + 1:o + k:2]] + 1  # after each layer's MoE run
    opens = np.r_[0, ends[:-1]]
    mixer_at = pos[first[o:o + k:2]]  # each layer's first mixer anchor
    same = [i for i in range(1, n) if plan.mixers[i] == plan.mixers[0]]
    lead = int(mixer_at[same[0]] - opens[same[0]]) if same else 0
    opens[0] = max(start, int(mixer_at[0]) - lead, int(pos[last[o - 1]]) + 1 if o else start)
    for i in range(n):
        out[int(opens[i]):int(ends[i])] = i
    return out


def _contradictions(found: Counter[tuple[str, str, int]], steps: int) -> list[str]:
    """One line per (config's type, kernels' type): which layers, in how many of the steps cut."""
    by: dict[tuple[str, str], list[int]] = {}
    for (said, seen, i), k in sorted(found.items(), key=lambda x: x[0][2]):
        by.setdefault((said, seen), []).append(i)
    out = []
    for (said, seen), layers in by.items():
        shown = ", ".join(map(str, layers[:8])) + (f" and {len(layers) - 8} more" if len(layers) > 8 else "")
        most = max(found[(said, seen, i)] for i in layers)
        out.append(f"layer plan contradicted: layers {shown}: the config says {said}, their kernels show {seen} "
                   f"(in up to {most} of {steps} step(s)); the kernels' type is shown")
    return out


def _layer0_start(is_mixer: np.ndarray, code: np.ndarray, *, start: int, opens: np.ndarray, post: np.ndarray,
                  mixer: np.ndarray) -> int:
    """Where layer 0 begins: as many kernels before its first mixer kernel as the next layer of its type has
    from its opening norm to its first mixer kernel; never before ``start``. Without a mixer kernel: ``start``."""
    is_mixer = is_mixer & (code >= 0)
    a0 = np.flatnonzero(is_mixer[start:post[0]])
    if a0.size == 0:
        return start
    for i in np.flatnonzero(mixer[1:] == mixer[0]).tolist():
        lo = int(opens[i + 1])
        ai = np.flatnonzero(is_mixer[lo + 1:post[i + 1]])
        if ai.size:
            return max(start, start + int(a0[0]) - (int(ai[0]) + 1))
    return start


def structural(steps: dict[int, np.ndarray], *, plan: LayerPlan, evidence: np.ndarray, replayed: np.ndarray,
               kview: np.ndarray, boundary: np.ndarray, rules: LayerRules,
               known_layer: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, StructuralResult]:
    """:func:`structural_step` over every step (``steps``: step -> its items in launch order). ``evidence``:
    module-view label of items attributed otherwise (None where op rule and module tree gave nothing).
    ``known_layer``: the layer the module tree gave each item (-1 none): a step with a graph replay is cut
    whatever it says (the tree says where the graph was launched), a step without one only when no item has a
    layer (a trace recorded without stacks, or a torch.compile'd forward, whose decoder layers are inlined).
    Returns per item the layer (-1 where not placed) and label (None where unchanged), and what was done."""
    n = kview.size
    blocks = (*rules.mixer_buckets, "moe")
    # label codes: blocks, the dense MLP, the model's norm, the LM head (the class the module tree names)
    names = np.asarray([*blocks, rules.dense_bucket, "norm", LM_HEAD], dtype=object)
    free = pd.isna(evidence)
    # block index per item, through the distinct labels only (a few dozen)
    codes, cats = pd.factorize(np.where(free, kview, evidence))
    shown = np.asarray([blocks.index(str(c)) if str(c) in blocks else -1 for c in cats], dtype=np.int64)[codes]
    codes, cats = pd.factorize(kview)
    comp = np.asarray([str(c) in COMPONENTS for c in cats], dtype=bool)[codes]
    gemm = np.asarray([str(c) == "gemm" for c in cats], dtype=bool)[codes]
    layer = np.full(n, -1, dtype=np.int64)
    code = np.full(n, -1, dtype=np.int64)
    done, left, notes, types = 0, 0, [], {}
    contradicted: Counter[tuple[str, str, int]] = Counter()  # (config's type, kernels' type, layer) -> steps
    for k, rows in steps.items():
        if known_layer is not None and not replayed[rows].any() and (known_layer[rows] >= 0).any():
            continue  # the module tree placed this step's kernels
        lay, lab, contra, why, seen = structural_step(rows, plan=plan, shown=shown, component=comp,
                                                      replayed=replayed, boundary=boundary, blocks=blocks,
                                                      gemm=gemm)
        if why is not None:
            left += 1
            notes.append(f"step {k} left alone: {why}")
            continue
        done += 1
        layer[rows], code[rows] = lay, lab
        types = types or seen
        contradicted.update((plan.layer_type(i), seen[i], i) for i in contra)
    notes += _contradictions(contradicted, done)
    placed = layer >= 0
    label = np.where(code >= 0, names[np.maximum(code, 0)], np.where(placed, kview, None))
    with_module = int((free & (code >= 0)).sum())  # the model's norm and LM head among them, outside the layers
    return layer, label, StructuralResult(with_module=with_module, layer_only=int((placed & free & (code < 0)).sum()),
                                          layer_added=int((placed & ~free).sum()), steps_done=done,
                                          steps_left=left, layer_types=types, notes=tuple(notes))
