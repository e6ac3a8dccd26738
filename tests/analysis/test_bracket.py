"""Bracketed attribution (analysis.bracket): what lies between attributed kernels in launch order.

Kernel names are real (traces/h200/own-graph: torch.compile's fused glue and vLLM's fused add + RMSNorm);
labels/layers stand for what alignment gave the neighbours."""

from __future__ import annotations

import numpy as np
import pytest

from phaseprof.analysis.bracket import bracket_step, is_boundary
from phaseprof.analysis.graph_align import compatible
from phaseprof.analysis.modules import load_layer_rules

IN_NORM = "triton_red_fused__to_copy_add_copy__fused_add_rms_norm_4"  # input_layernorm (adds the residual)
POST_NORM = "triton_red_fused__to_copy_add_fused_add_rms_norm_moe_forward_shared_3"  # post_attention_layernorm
GLUE = "triton_poi_fused_0"
GEMM = "nvjet_sm90_tst_256x128_64x4_2x1_v_bz_coopA_TNT"


def _run(rows: list[tuple[str, str, str | None, int]]) -> tuple[list[str | None], list[int], int]:
    """rows: (kernel name, kernel-view bucket, label or None = no evidence, layer)."""
    names = np.array([r[0] for r in rows], dtype=object)
    label = np.array([r[2] for r in rows], dtype=object)
    layer = np.array([r[3] for r in rows], dtype=np.int64)
    kview = np.array([r[1] for r in rows], dtype=object)
    free = np.array([r[2] is None for r in rows])
    done, _ = bracket_step(np.arange(len(rows)), label=label, layer=layer, unattributed=free, kview=kview,
                           boundary=is_boundary(names, load_layer_rules()), compatible=compatible,
                           rules=load_layer_rules())
    return label.tolist(), layer.tolist(), int(done.size)


def test_between_two_kernels_of_one_block_takes_the_block():
    lab, lay, n = _run([("a", "gemm", "gdn", 4), (GLUE, "elementwise", None, -1), ("b", "gdn", "gdn", 4)])
    assert (lab, lay, n) == (["gdn", "gdn", "gdn"], [4, 4, 4], 1)


def test_a_kernel_naming_another_component_keeps_its_name_but_takes_the_layer():
    lab, lay, _ = _run([("a", "gdn", "gdn", 4), ("fused_moe_kernel", "moe", None, -1), ("b", "gdn", "gdn", 4)])
    assert lab[1] == "moe" and lay[1] == 4


def test_across_a_layer_boundary_the_fused_add_norm_opens_the_next_layer():
    # layer 0's MoE tail (the second expert GEMM, the top-k sum) ran before layer 1's input_layernorm
    lab, lay, n = _run([("m", "moe", "moe", 0), ("fused_moe_kernel", "moe", None, -1), (GLUE, "elementwise", None, -1),
                        (IN_NORM, "norm", None, -1), ("g", "gemm", "gdn", 1)])
    assert lab == ["moe", "moe", "moe", "norm", "gdn"] and lay == [0, 0, 0, 1, 1] and n == 3


def test_inside_a_layer_the_post_attention_norm_splits_mixer_and_moe():
    # GDN's out_proj GEMM (no partner in the eager run: another tile) lies before the norm: it ran for GDN
    lab, lay, _ = _run([("c", "gdn", "gdn", 2), (GEMM, "gemm", None, -1), (POST_NORM, "norm", None, -1),
                        ("r", "gemm", "moe", 2)])
    assert lab == ["gdn", "gdn", "norm", "moe"] and lay == [2, 2, 2, 2]


def test_two_blocks_and_no_boundary_between_them_keep_the_kernel_view():
    lab, lay, _ = _run([("c", "gdn", "gdn", 2), (GEMM, "gemm", None, -1), ("r", "gemm", "moe", 2)])
    assert lab[1] == "gemm" and lay[1] == 2


def test_from_one_moe_block_to_the_next_the_first_of_two_boundaries_opens_the_layer():
    # the 128-token prefill (traces/h200/graph): only the MoE blocks aligned; layer 1's GDN in_proj GEMM lies after
    # layer 1's input_layernorm and before its post-attention norm, next to GDN's custom-op kernels
    lab, lay, _ = _run([("m", "moe", "moe", 0), (IN_NORM, "norm", None, -1), (GEMM, "gemm", None, -1),
                        ("chunk_fwd_kernel_o", "gdn", "gdn", -1), (GEMM, "gemm", None, -1),
                        (POST_NORM, "norm", None, -1), ("r", "moe", "moe", 1)])
    assert lay == [0, 1, 1, 1, 1, 1, 1]
    assert lab == ["moe", "norm", "gdn", "gdn", "gdn", "norm", "moe"]


@pytest.mark.parametrize("between", [[], [IN_NORM, IN_NORM]])
def test_a_layer_change_without_exactly_one_boundary_is_left_alone(between):
    rows = [("m", "moe", "moe", 0), (GLUE, "elementwise", None, -1),
            *[(n, "norm", None, -1) for n in between], ("g", "gemm", "gdn", 1)]
    lab, lay, n = _run(rows)
    assert n == 0 and lay[1:-1] == [-1] * (len(rows) - 2) and lab[1:-1] == [None] * (len(rows) - 2)


def test_op_rule_kernels_outside_layers_gain_the_layer_only():
    # vLLM's GDN custom op runs between piecewise graphs: op rule says gdn, no layer
    lab, lay, n = _run([("a", "gemm", "gdn", 7), ("chunk_fwd_kernel_o", "gdn", "gdn", -1), ("b", "gemm", "gdn", 7)])
    assert (lab, lay, n) == (["gdn", "gdn", "gdn"], [7, 7, 7], 0)


def test_after_the_last_layer_the_models_norm_stays_outside_layers():
    lab, lay, n = _run([("m", "moe", "moe", 39), ("fused_moe_kernel", "moe", None, -1), (IN_NORM, "norm", None, -1),
                        (GLUE, "elementwise", None, -1), ("lm", "gemm", "LogitsProcessor", -1)])
    assert lab == ["moe", "moe", "norm", None, "LogitsProcessor"] and lay == [39, 39, -1, -1, -1] and n == 2
