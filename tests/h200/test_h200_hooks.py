"""Module attribution on phaseprof's *own* H200 captures with the module tree from module hooks (``--hierarchy hooks``,
the default): traces/h200/hooks/ (README there: vLLM 0.23.0, qwen3.5-35b-a3b, eager and graph mode).

- eager prefill 4096: the hooks' ``nn.Module:`` scopes give the module tree, so ``norm`` (GemmaRMSNorm as ATen
  kernels) is the GPU time of kernels launched inside ``*RMSNorm_N`` scopes, computed here from the raw JSON;
  all 40 decoder layers with their types;
- graph mode (FULL_AND_PIECEWISE): with phaseprof's own eager capture (prefill) or vLLM's own eager profile
  (decode, committed in traces/h200/own-eager/) as the reference, ≥ 95 % of GPU time gets a module or layer.
Committed fixtures: a missing one is a failure, not a skip.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from phaseprof.analysis.attribution_types import Method
from phaseprof.analysis.pipeline import analyze_trace

from .rawtrace import MODULE_SCOPE_CATS, rmsnorm_kernel_us

REPO = Path(__file__).resolve().parents[2]
HOOKS = REPO / "traces/h200/hooks"
EAGER_PREFILL = HOOKS / "eager-prefill-4096/trace.json.gz"
GRAPH_PREFILL = HOOKS / "graph-prefill-4096/trace.json.gz"
GRAPH_DECODE = HOOKS / "graph-decode-4096in-32out-steps1-4/trace.json.gz"
OWN_EAGER = REPO / "traces/h200/own-eager/vllm-own-eager-prefill4096-decode1.pt.trace.json.gz"


@pytest.fixture(scope="module")
def eager():
    return analyze_trace(EAGER_PREFILL)


def _norm_kernel_us_from_raw(path: Path) -> float:
    """GemmaRMSNorm kernels, inside phaseprof's step markers: ``rawtrace.rmsnorm_kernel_us``."""
    return rmsnorm_kernel_us(path, lambda n: n.startswith("phaseprof_step#"))


def test_hooks_record_the_module_tree_and_norm_is_the_rmsnorm_kernels(eager):
    raw = _norm_kernel_us_from_raw(EAGER_PREFILL)
    norm = sum(b.time_us for ph in eager.phases for b in ph.module_view if b.bucket == "norm")
    assert raw > 0 and norm == pytest.approx(raw, rel=0.05)
    # the kernel view cannot see it: GemmaRMSNorm is plain ATen kernels in eager mode
    kernel_norm = sum(b.time_us for ph in eager.phases for b in ph.kernel_view if b.bucket == "norm")
    assert kernel_norm < 0.5 * norm


def test_hooks_give_all_40_layers_gdn_and_attention_told_apart(eager):
    (pa,) = eager.attribution.phases
    assert [r.layer for r in pa.layers] == list(range(40))
    assert [r.layer for r in pa.layers if r.layer_type == "attention+moe"] == list(range(3, 40, 4))
    assert sum(r.layer_type == "gdn+moe" for r in pa.layers) == 30
    assert 100 - pa.coverage_pct[Method.KERNEL_NAME] >= 95


@pytest.mark.parametrize(("trace", "reference"), [(GRAPH_PREFILL, EAGER_PREFILL), (GRAPH_DECODE, OWN_EAGER)],
                         ids=["prefill-4096", "decode-4096"])
def test_graph_capture_gets_modules_and_layers_for_95_percent(trace, reference):
    bd = analyze_trace(trace, graph_reference=reference)
    assert bd.attribution.mode == ("piecewise graphs" if trace == GRAPH_PREFILL else "full graphs")
    for pa in bd.attribution.phases:
        assert 100 - pa.coverage_pct[Method.KERNEL_NAME] >= 95, (pa.phase, pa.coverage_pct)
        assert pa.coverage_pct[Method.GRAPH_ALIGNMENT] > 30
        assert [r.layer for r in pa.layers] == list(range(40))
    for ph in bd.phases:  # the GEMMs of the GDN and MoE blocks leave the gemm bucket in the module view
        kv = {b.bucket: b.time_us for b in ph.kernel_view}
        mv = {b.bucket: b.time_us for b in ph.module_view}
        assert mv["gdn"] > kv["gdn"] and mv["moe"] >= kv["moe"] and mv.get("gemm", 0.0) < 0.5 * kv["gemm"]


def test_graph_mode_hooks_see_only_what_runs_outside_compiled_code():
    ev = json.loads(gzip.decompress(GRAPH_PREFILL.read_bytes()))["traceEvents"]
    scopes = {re.sub(r"_\d+$", "", e["name"][len("nn.Module: "):]) for e in ev
              if e.get("cat") in MODULE_SCOPE_CATS and str(e.get("name")).startswith("nn.Module: ")}
    assert scopes and "Qwen3NextDecoderLayer" not in scopes  # inlined into the compiled graph
