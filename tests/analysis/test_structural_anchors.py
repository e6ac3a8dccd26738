"""``structural.anchor_layers``: layers from the mixer / MoE anchor runs when no fused norm cuts a step.
Input and expected output side by side: a step's kernels as block codes (0 gdn, 1 attention, 2 moe, -1 none)."""

from __future__ import annotations

import numpy as np

from phaseprof.analysis.layer_plan import LayerPlan
from phaseprof.analysis.structural import anchor_layers

BLOCKS = ("gdn", "attention", "moe")
G, A, M, _ = 0, 1, 2, -1


def _plan(mixers: str, ffn: str = "moe") -> LayerPlan:
    mx = tuple({"g": "gdn", "a": "attention"}[c] for c in mixers)
    return LayerPlan(mixers=mx, ffns=(ffn,) * len(mx), source="test")


def test_three_layers_after_a_stray_attention_kernel():
    #        runner  layer 0 ----------------  layer 1 ----------------  layer 2 ----------   lm head
    code = [_, A, _, _, G, G, _, _, M, M, _, _, _, G, _, G, _, M, _, _, _, A, _, _, M, M, _, _, _]
    got = anchor_layers(np.asarray(code), plan=_plan("gga"), blocks=BLOCKS, start=0)
    want = [-1, -1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, -1, -1, -1]
    # layer 0 would start 3 kernels before its first GDN kernel, as layer 1 does (its norm and in_proj), but never
    # before the end of the run ahead of it (the stray attention kernel): at index 2
    assert got.tolist() == want


def test_refused_when_the_runs_do_not_spell_the_plan():
    code = np.asarray([G, M, A, M, G, M])  # the config says g, g, a
    why = anchor_layers(code, plan=_plan("gga"), blocks=BLOCKS, start=0)
    assert isinstance(why, str) and "do not hold the config's 3 layers in order" in why
    dense = anchor_layers(np.asarray([A, _, A, _]), plan=_plan("aa", ffn="dense"), blocks=BLOCKS, start=0)
    assert dense == "no anchors close a dense layer (its MLP has none)"
