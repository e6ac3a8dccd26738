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
  the span shows (in_proj, conv glue and out_proj are the mixer's), and ``moe`` in a feed-forward span that
  runs MoE kernels (router, shared expert). A dense MLP has no rule-named bucket (the module tree shows its
  class name), so its kernels get the layer only and keep their kernel view: no module is invented.

The plan is checked, never forced: a step whose boundary count does not fit the config's layer count is left
alone (the reason is reported); a layer whose kernels show another type than the config says keeps what its
kernels show, and the difference is reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from phaseprof.analysis.graph_align import COMPONENTS
from phaseprof.analysis.layer_plan import LayerPlan
from phaseprof.analysis.modules import LayerRules


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


def _mixer_of(labels: list[object], rules: LayerRules) -> str | None:
    present = set(map(str, labels))
    return next((b for b in rules.mixer_buckets if b in present), None)


def structural_step(rows: np.ndarray, *, plan: LayerPlan, evidence: np.ndarray, replayed: np.ndarray,
                    kview: np.ndarray, boundary: np.ndarray, rules: LayerRules
                    ) -> tuple[np.ndarray, np.ndarray, list[str], str | None, dict[int, str]]:
    """Layer and label for the items ``rows`` (one step, in launch order). ``evidence``: module-view label of
    items attributed otherwise (None where unknown: op rule or module tree gave nothing). Returns, per row, the
    layer (-1 outside) and label (None: unchanged), the layer types the step shows, the contradictions with the
    plan, and why the step was left alone (None when it was not)."""
    m = rows.size
    layer = np.full(m, -1, dtype=np.int64)
    label = np.full(m, None, dtype=object)
    rep = np.flatnonzero(replayed[rows])
    if rep.size == 0:
        return layer, label, [], "no graph-replayed kernels", {}
    start = int(rep[0])
    b = np.flatnonzero(boundary[rows])
    b = b[b >= start]
    n = plan.num_layers
    if b.size == 2 * n + 1:  # layer 0's input norm is fused with an add too
        opening0, cuts = int(b[0]), b[1:]
    elif b.size == 2 * n:
        opening0, cuts = -1, b
    else:
        return layer, label, [], (f"{b.size} fused add-RMSNorm kernels after the first graph-replayed kernel; "
                                  f"the config's {n} layers need {2 * n}"), {}
    kv = kview[rows]
    ev = evidence[rows]
    shown = np.where(ev == None, kv, ev)  # noqa: E711 (elementwise on an object array)
    post, ends = cuts[0::2], cuts[1::2]  # post-attention norms; next layer's input norm (the last: model norm)
    opens = np.concatenate(([opening0], ends[:-1]))
    mixers = [_mixer_of(shown[(opens[i] if opens[i] >= 0 else start) + 1:post[i]].tolist(), rules) for i in range(n)]
    if opening0 < 0:
        opening0 = _layer0_start(shown, start=start, post0=int(post[0]), opens=opens, post=post, mixers=mixers,
                                 rules=rules)
        opens[0] = opening0
    pos = np.arange(opening0, int(ends[-1]))
    seg = np.searchsorted(np.stack([opens, post], axis=1).ravel(), pos, side="right") - 1
    lay, in_ffn = seg // 2, (seg % 2).astype(bool)
    layer[pos] = lay
    ffns = ["moe" if (shown[post[i] + 1:ends[i]] == "moe").any() else "dense" for i in range(n)]
    types = {i: f"{mixers[i] or 'other'}+{ffns[i]}" for i in range(n)}
    notes = [f"layer {i}: the config says {plan.layer_type(i)}, its kernels show {types[i]}"
             for i in range(n) if types[i] != plan.layer_type(i)]
    norm_at = np.zeros(m, dtype=bool)
    norm_at[opens] = True
    norm_at[post] = True
    block = np.where(in_ffn, np.asarray([f if f == "moe" else None for f in ffns], dtype=object)[lay],
                     np.asarray(mixers, dtype=object)[lay])
    own = kv[pos]
    keep = norm_at[pos] | np.isin(own.astype(str), list(COMPONENTS)) | (block == None)  # noqa: E711
    label[pos] = np.where(keep, own, block)
    return layer, label, notes, None, types


def _layer0_start(shown: np.ndarray, *, start: int, post0: int, opens: np.ndarray, post: np.ndarray,
                  mixers: list[str | None], rules: LayerRules) -> int:
    """Where layer 0 begins: as many kernels before its first mixer kernel as the next layer of its type has
    from its opening norm to its first mixer kernel; never before ``start``. Without a mixer kernel: ``start``."""
    mix = set(rules.mixer_buckets)

    def first_mixer(lo: int, hi: int) -> int | None:
        hit = [j for j, x in enumerate(shown[lo:hi].tolist()) if str(x) in mix]
        return lo + hit[0] if hit else None

    a0 = first_mixer(start, post0)
    if a0 is None:
        return start
    for i in range(1, len(post)):
        if mixers[i] == mixers[0]:
            ai = first_mixer(int(opens[i]) + 1, int(post[i]))
            if ai is not None:
                return max(start, a0 - (ai - int(opens[i])))
    return start


def structural(steps: dict[int, np.ndarray], *, plan: LayerPlan, evidence: np.ndarray, replayed: np.ndarray,
               kview: np.ndarray, boundary: np.ndarray, rules: LayerRules) -> tuple[np.ndarray, np.ndarray,
                                                                                   StructuralResult]:
    """:func:`structural_step` over every step (``steps``: step -> its items in launch order). Returns per item
    the layer (-1 where not placed) and label (None where unchanged), and what was done."""
    n = kview.size
    layer = np.full(n, -1, dtype=np.int64)
    label = np.full(n, None, dtype=object)
    done, left, notes, types = 0, 0, [], {}
    for k, rows in steps.items():
        lay, lab, contra, why, shown = structural_step(rows, plan=plan, evidence=evidence, replayed=replayed,
                                                       kview=kview, boundary=boundary, rules=rules)
        if why is not None:
            if why != "no graph-replayed kernels":
                left += 1
                notes.append(f"step {k} left alone: {why}")
            continue
        done += 1
        layer[rows], label[rows] = lay, lab
        types = types or shown
        notes += [f"step {k}: {c}" for c in contra if len(notes) < 20]
    free = evidence == None  # noqa: E711
    placed = layer >= 0
    with_module = int((placed & free & (label != kview)).sum())
    return layer, label, StructuralResult(with_module=with_module, layer_only=int((placed & free).sum()) - with_module,
                                          layer_added=int((placed & ~free).sum()), steps_done=done,
                                          steps_left=left, layer_types=types, notes=tuple(notes))
