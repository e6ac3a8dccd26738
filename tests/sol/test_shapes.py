"""GEMM cross-check against recorded Input Dims, on a real trace that has them: vLLM gpt-oss-120b TP8 on B200
(traces/public-cut/b200_vllm_gptoss120b_eager_prefill_window.json.gz, from AMD-AGI/TraceLens, one 888-token
prefill step's last layers)."""

from __future__ import annotations

import json
from pathlib import Path

from phaseprof.commands.main import main
from phaseprof.sol.model import sol_model
from phaseprof.sol.shapes import _mkn, check_shapes, weight_shapes
from phaseprof.sol.work import Component

from .test_work import GPT_OSS_120B

TRACE = Path(__file__).resolve().parents[2] / "traces" / "public-cut" / "b200_vllm_gptoss120b_eager_prefill_window.json.gz"


def test_gemm_shapes_from_input_dims():
    assert _mkn("aten::linear", [[888, 2880], [640, 2880], [640]]) == (888, 2880, 640)
    assert _mkn("aten::addmm", [[640], [888, 2880], [2880, 640], [], []]) == (888, 2880, 640)
    assert _mkn("aten::mm", [[1, 2880], [2880, 25136]]) == (1, 2880, 25136)
    assert _mkn("aten::bmm", [[4, 8, 16], [4, 16, 32]]) == (32, 16, 32)
    assert _mkn("aten::matmul", [[3, 4], [2, 4, 5]]) is None  # batched weight: not a projection


def test_tensor_parallel_weight_shapes():
    shapes = weight_shapes(sol_model(GPT_OSS_120B), tp=8)
    # qkv 2880 -> (64*64 + 2*8*64) / 8 = 640 (column-parallel); o 64*64 / 8 = 512 -> 2880 (row-parallel)
    assert shapes[(2880, 640)] is Component.ATTN_PROJ and shapes[(512, 2880)] is Component.ATTN_PROJ
    assert shapes[(2880, 201088 // 8)] is Component.LM_HEAD and shapes[(2880, 128)] is Component.ROUTER


def test_b200_gpt_oss_gemms_match_the_model():
    check = check_shapes(TRACE, sol_model(GPT_OSS_120B), tp=8)
    assert check is not None and check.steps == 1 and check.unmatched_calls == 0
    rows = {r.component: r for r in check.rows}
    # the window holds 7 layers' qkv + o, 8 routers, and the lm_head on the prompt's last token
    assert {c: r.calls for c, r in rows.items()} == {"attn_proj": 14, "router": 8, "lm_head": 1}
    assert rows["router"].shape_flops == 8 * 2 * 888 * 2880 * 128
    assert all(r.diff_pct == 0 for r in check.rows)


def test_wrong_config_shows_up(tmp_path: Path, capsys):
    wrong = {**GPT_OSS_120B, "num_local_experts": 32}  # gpt-oss-20b's expert count
    check = check_shapes(TRACE, sol_model(wrong), tp=8)
    assert "router" not in {r.component for r in check.rows} and check.unmatched_calls == 8
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(GPT_OSS_120B))
    assert main(["analyze", str(TRACE), "--model-config", str(cfg), "--cross-check", "shapes"]) == 0
    out = capsys.readouterr().out
    assert "GEMM FLOPs: recorded shapes vs work model" in out and "attn_proj" in out


def test_trace_without_shapes(capsys):
    h200 = next((TRACE.parents[1] / "h200" / "graph").glob("*-prefill-4096")) / "trace.json.gz"
    assert main(["analyze", str(h200), "--cross-check", "shapes"]) == 0
    assert "recorded no GEMM shapes" in capsys.readouterr().out
