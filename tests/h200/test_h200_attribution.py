"""Module attribution's acceptance on the H200 traces of the 35B-A3B hybrid recorded by vLLM 0.23's own profiler with
Python stacks (eager and graph mode): norm from the module tree, per-layer view, graph-mode coverage.

The trimmed copies live in traces/h200/own-eager/, traces/h200/own-graph/ and traces/h200/fp8/ (their READMEs say
how they were recorded and cut); they are committed, so a missing one is a failure, not a skip.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from phaseprof.analysis.attribution_types import Method
from phaseprof.analysis.pipeline import analyze_trace

from .rawtrace import rmsnorm_kernel_us

REPO = Path(__file__).resolve().parents[2]


def _trace(sub: str) -> Path:
    d = REPO / "traces/h200" / sub
    found = sorted(d.rglob("*.json.gz")) if d.is_dir() else []
    found = [p for p in found if "capture" not in p.name]
    assert found, f"traces/h200/{sub}/ holds no trace"
    return found[0]


@pytest.fixture(scope="module")
def eager():
    path = _trace("own-eager")
    return path, analyze_trace(path)


def _norm_kernel_us_from_raw(path: Path) -> float:
    """GemmaRMSNorm kernels inside vLLM's step annotations (not its empty last one): ``rawtrace.rmsnorm_kernel_us``."""
    return rmsnorm_kernel_us(path, lambda n: n.startswith("execute_context_") and "context_0(0)_generation_0(0)" not in n)


def test_norm_is_the_time_of_kernels_under_rmsnorm_modules(eager):
    path, bd = eager
    raw = _norm_kernel_us_from_raw(path)
    norm = sum(b.time_us for ph in bd.phases for b in ph.module_view if b.bucket == "norm")
    assert raw > 0 and norm > 0
    assert norm == pytest.approx(raw, rel=0.05)


def test_per_layer_table_has_all_40_layers_gdn_and_attention_told_apart(eager):
    _, bd = eager
    for pa in bd.attribution.phases:
        types = [r.layer_type for r in pa.layers]
        assert [r.layer for r in pa.layers] == list(range(40))
        assert types.count("gdn+moe") == 30 and types.count("attention+moe") == 10
        # the 35B-A3B pattern: every fourth layer is full attention
        assert [r.layer for r in pa.layers if r.layer_type == "attention+moe"] == list(range(3, 40, 4))


def test_no_empty_step_in_the_phases(eager):
    _, bd = eager
    assert {s.phase for s in bd.steps} <= {"prefill", "decode", "mixed"}
    assert all(s.context_tokens or s.generation_tokens for s in bd.steps)


def test_module_tree_covers_most_of_the_eager_run(eager):
    _, bd = eager
    for pa in bd.attribution.phases:
        covered = 100 - pa.coverage_pct[Method.KERNEL_NAME]
        assert covered >= 95, (pa.phase, pa.coverage_pct)


def test_graph_mode_kernels_take_modules_and_layers_from_the_eager_run(eager):
    """Graph mode (FULL_AND_PIECEWISE) hides the module tree (torch.compile); aligned with the eager run of the same
    model, replayed kernels get modules and all 40 layers back, and the module view differs from the kernel view
    where it should: the GEMMs of the GDN and MoE blocks."""
    graph = analyze_trace(_trace("own-graph"), graph_reference=eager[0])
    a = graph.attribution
    assert a.mode == "full and piecewise graphs"
    assert a.alignment_counts["replayed_paired"] > 0.4 * a.alignment_counts["replayed"]
    for pa in a.phases:
        assert [r.layer for r in pa.layers] == list(range(40))
        assert [r.layer for r in pa.layers if r.layer_type == "attention+moe"] == list(range(3, 40, 4))
        # Module/layer attribution (module tree, op stack, graph alignment, bracketing) >= 95% of GPU time
        assert pa.coverage_pct[Method.GRAPH_ALIGNMENT] > 40 and pa.coverage_pct[Method.BRACKETED] > 0
        assert 100 - pa.coverage_pct[Method.KERNEL_NAME] >= 95, (pa.phase, pa.coverage_pct)
    for ph in graph.phases:
        kv = {b.bucket: b.time_us for b in ph.kernel_view}
        mv = {b.bucket: b.time_us for b in ph.module_view}
        assert mv["gdn"] > kv["gdn"] and mv["moe"] >= kv["moe"] and mv.get("gemm", 0.0) < 0.5 * kv["gemm"]


#: Kernels only one block type runs (by name): the GDN recurrence, the routed experts, FlashAttention's forward.
_BLOCK_SIGNATURE = {"gdn": ("chunk_gated_delta_rule_fwd", "fused_recurrent_gated_delta_rule"),
                    "moe": ("fused_moe_kernel",), "attention": ("FlashAttnFwd",)}


def _nvjet_us_per_block_from_raw(path: Path) -> dict[str, float]:
    """GPU time of nvjet GEMMs per block type, straight from the JSON and the model's structure: in each step's
    GPU order, the fused residual add + RMSNorm kernels (``fused_add_rms_norm``) separate the blocks of
    Qwen3NextDecoderLayer (norm -> mixer -> norm -> MoE -> next layer's norm); a block is a GDN / MoE /
    attention block when it runs that block's signature kernel."""
    ev = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") == "user_annotation"
                   and str(e["name"]).startswith("execute_context_"))
    launch = {e["args"]["correlation"]: e["ts"] for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")
              and "correlation" in e.get("args", {})}
    out: dict[str, float] = {}
    for a, b in steps:
        ks = sorted((k for k in ev if k.get("cat") == "kernel"
                     and a <= launch.get(k["args"].get("correlation"), -1) < b), key=lambda k: k["ts"])
        block: list[dict] = []
        for k in [*ks, None]:
            if k is not None and "fused_add_rms_norm" not in k["name"]:
                block.append(k)
                continue
            kind = [t for t, sig in _BLOCK_SIGNATURE.items() if any(s in x["name"] for x in block for s in sig)]
            if len(kind) == 1:
                out[kind[0]] = out.get(kind[0], 0.0) + sum(x["dur"] for x in block if x["name"].startswith("nvjet"))
            block = []
    return out


def test_gemms_of_gdn_and_moe_blocks_go_to_gdn_and_moe_in_the_module_view(eager):
    """The module view files the graph trace's nvjet GEMMs under the block that ran them (in_proj / out_proj under
    gdn, router and shared expert under moe): the same time as the raw trace's blocks hold."""
    from phaseprof.analysis.pipeline import AnalysisConfig, analyze

    path = _trace("own-graph")
    raw = _nvjet_us_per_block_from_raw(path)
    items = analyze(path, config=AnalysisConfig(graph_reference=eager[0])).prepared.items
    nvjet = items[items["name"].astype(str).str.startswith("nvjet")]
    # kernel durations, not the busy-time shares: the shared expert's GEMMs overlap the routed experts (own stream)
    dur_us = (nvjet["end_ns"] - nvjet["ts_ns"]) / 1e3
    mv = dur_us.groupby(nvjet["module_bucket"].astype(str)).sum()
    assert raw["gdn"] > 0 and raw["moe"] > 0 and raw["attention"] > 0
    for block in ("gdn", "moe", "attention"):
        assert mv[block] == pytest.approx(raw[block], rel=0.01), (block, dict(mv), raw)
    # the kernel view cannot see it: every nvjet kernel is a GEMM there
    assert set(nvjet["kernel_bucket"].astype(str)) == {"gemm"}


def test_fp8_prefill_has_no_unknown_kernels_and_a_quant_bucket():
    bd = analyze_trace(_trace("fp8"))
    assert bd.unknown_kernels == []
    ph = bd.phases[0]
    quant = {k.name for k in ph.top_kernels["quant"]}
    assert any("segmented_max_reduction_strided" in n for n in quant)
    assert next(b for b in ph.kernel_view if b.bucket == "quant").share_pct > 1


def test_diff_shows_coverage_by_method_and_the_per_layer_view(eager):
    """phaseprof diff (text and markdown) of the eager run against the graph run with its reference: the attribution
    methods' shares and the per-layer times of both sides."""
    import io

    from rich.console import Console

    from phaseprof.report.diff import diff_breakdowns
    from phaseprof.commands.diff import print_diff
    from phaseprof.report.diff_markdown import diff_markdown

    graph = analyze_trace(_trace("own-graph"), graph_reference=eager[0])
    d = diff_breakdowns(eager[1], graph)
    out = io.StringIO()
    print_diff(d, Console(file=out, width=80))
    text = out.getvalue()
    for phase in ("prefill", "decode"):
        assert f"{phase}: module view from (% of GPU busy)" in text and f"{phase}: per decoder layer" in text
    bracketed = next(pa for pa in graph.attribution.phases if pa.phase == "decode").coverage_pct[Method.BRACKETED]
    assert re.search(rf"│ bracketed\s+│\s+0\.0 │\s+{bracketed:.1f} │", text)
    assert "layer 39 attention+moe" in text
    md = diff_markdown(d)
    assert "| bracketed |" in md and "| layer 3 attention+moe |" in md
