"""Layers from vLLM's own traces in every execution mode, from the trace and ``--model-config``
alone (``analysis/structural.py``: the fused add-RMSNorm cuts, else the mixer/MoE anchor runs).

Modes, each on real traces:
- full and piecewise CUDA graphs: the served 35B-A3B rank traces (``traces/h200/server-tp1/``, vLLM 0.23's own
  profiler with stacks) and the same traces without their ``nn.Module`` frames (as recorded without
  ``with_stack``);
- torch.compile'd without graphs (a batch above the largest capture size: Inductor kernels launched one by one, no
  module scopes): step 0 of the public H100 Llama-3-70B TP4 trace (vLLM's own profiler, 32 x 1,000-token prompts:
  ``../shared/traces/public``, ``public`` tier), config ``traces/public-cut/llama-3-70b.config.json``;
- eager without stacks (Gemma RMSNorm as plain ATen kernels: no fused norm to cut at, the anchors do it):
  phaseprof's eager captures without hooks (``traces/h200/eager/``, TP1) and the TP2 ranks
  (``traces/h200x2/tp2-eager-prefill4096-decode8/``), and vLLM's own eager trace without its module frames.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from phaseprof.analysis.attribution_types import Method
from phaseprof.analysis.pipeline import AnalysisConfig, analyze
from phaseprof.presets import load_preset
from phaseprof.trace.read import load_tables

REPO = Path(__file__).resolve().parents[2]
H200 = REPO / "traces/h200"
PRESET = "qwen3.5-35b-a3b"
SERVED_PREFILL = H200 / "server-tp1/prefill/rank0-prefill4096-and-empty-step.pt.trace.json.gz"
SERVED_DECODE = H200 / "server-tp1/decode/rank0-decode-2steps.pt.trace.json.gz"
OWN_EAGER = H200 / "own-eager/vllm-own-eager-prefill4096-decode1.pt.trace.json.gz"
EAGER_PREFILL = H200 / "eager/20261130T094724Z-h200-qwen3.5-35b-a3b-prefill-4096/trace.json.gz"
EAGER_DECODE = H200 / "eager/20261130T094747Z-h200-qwen3.5-35b-a3b-decode-128in-32out/trace.json.gz"
TP2_RANK0 = REPO / "traces/h200x2/tp2-eager-prefill4096-decode8/rank0.pt.trace.json.gz"
LLAMA70B_CONFIG = REPO / "traces/public-cut/llama-3-70b.config.json"
ATTENTION = set(range(3, 40, 4))  # the 35B: full attention every fourth layer


def _analyse(source, config: str | Path | None = PRESET):
    return analyze(source, config=AnalysisConfig.with_rules(None, model_config=str(config) if config else None))


def _without_stacks(path: Path):
    """The trace as recorded without ``with_stack``: its ``nn.Module`` frames dropped (the only Python frames the
    committed copies keep)."""
    t = load_tables(path)
    assert len(t.modules) > 0
    return replace(t, modules=t.modules.iloc[:0])


def _evidence(pa) -> float:
    return 100.0 - pa.coverage_pct[Method.KERNEL_NAME.value]


def _check_35b(a, *, min_pct: float = 95.0) -> None:
    """Every phase >= min_pct module + layer from evidence; all 40 layers, each with the config's type; in each
    step each layer holds its own MoE experts and its own mixer's core kernel."""
    want = [f"{'attention' if i in ATTENTION else 'gdn'}+moe" for i in range(40)]
    att = a.breakdown.attribution
    assert att.phases
    for pa in att.phases:
        assert _evidence(pa) >= min_pct, (pa.phase, pa.coverage_pct)
        assert [r.layer for r in pa.layers] == list(range(40))
        assert [r.layer_type for r in pa.layers] == want
    items = a.prepared.items
    name = items["name"].astype(str)
    for step in sorted(set(items["step"]) - {-1}):
        mine = items["step"] == step
        experts = Counter(items[mine & name.str.contains("fused_moe_kernel")]["layer"])
        assert set(experts) == set(range(40)) and len(set(experts.values())) == 1, experts
        attn = set(items[mine & name.str.contains("FlashAttnFwdSm90")]["layer"])
        assert attn == ATTENTION
        gdn = set(items[mine & name.str.contains("gated_delta")]["layer"])
        assert gdn == set(range(40)) - ATTENTION


@pytest.mark.parametrize("path", [SERVED_PREFILL, SERVED_DECODE], ids=["prefill-piecewise", "decode-full"])
def test_served_graph_trace_without_stacks(path):
    """The served rank traces as vLLM writes them without with_stack: no module scope left, the layer plan alone
    places every kernel; the LM head (the module tree's LogitsProcessor) is still named, by its place."""
    before = _analyse(path)
    after = _analyse(_without_stacks(path))
    _check_35b(after)
    for b, pa in zip(before.breakdown.attribution.phases, after.breakdown.attribution.phases):
        assert pa.coverage_pct[Method.MODULE_TREE.value] == 0.0
        assert _evidence(pa) >= _evidence(b) - 1.0
    mv = {r.bucket for ph in after.breakdown.phases for r in ph.module_view}
    assert "LogitsProcessor" in mv


@pytest.mark.parametrize("path", [EAGER_PREFILL, EAGER_DECODE, TP2_RANK0], ids=["prefill", "decode", "tp2-rank0"])
def test_eager_without_stacks_from_the_anchors(path):
    """Eager, no module scopes, RMSNorm unfused (Gemma's, ATen kernels): before the anchor layers no layer at all (57% /
    42% from op rules alone); now the mixer and MoE anchor runs cut every step into the config's 40 layers."""
    bare = _analyse(path, config=None) if path == TP2_RANK0 else None
    if bare is not None:  # the TP2 ranks have no run.json: without --model-config no plan, no layers
        assert all(not pa.layers for pa in bare.breakdown.attribution.phases)
    a = _analyse(path)
    _check_35b(a)
    assert "no graph replay, no module scopes in the layers" in a.breakdown.attribution.graph_alignment


def test_vllm_own_eager_trace_with_and_without_its_stacks():
    with_stack = _analyse(OWN_EAGER)
    _check_35b(with_stack)
    assert all(pa.coverage_pct[Method.STRUCTURAL.value] == 0.0 for pa in with_stack.breakdown.attribution.phases)
    bare = _analyse(_without_stacks(OWN_EAGER))
    _check_35b(bare)
    # the layers agree with the module tree's on nearly all GPU time: the anchors end a layer at its last MoE
    # kernel, the tree at the layer's return
    a, b = with_stack.prepared.items, bare.prepared.items
    share = a["share_ns"].to_numpy()
    same = a["layer"].to_numpy() == b["layer"].to_numpy()
    assert share[same].sum() / share.sum() > 0.97


@pytest.mark.public
def test_compiled_without_graphs_public_llama70b(public_dir):
    """Step 0 of the public H100 Llama-3-70B TP4 trace (vLLM's own profiler): a 32 x 1,000-token prefill above
    the largest capture size, torch.compile'd without graphs. Before the layer plan cut compiled steps: 0 of 80 layers, 13.8% of the
    trace's GPU time from evidence (op rules); now every step, graphs or not, is cut into its 80 layers."""
    path = public_dir / "traceMap__1_h100_1000isl_10osl_32con.pt.trace.json.gz"
    a = _analyse(path, config=LLAMA70B_CONFIG)
    items = a.prepared.items
    t = a.prepared.tables
    rt = t.runtime["name"].astype(str).to_numpy()
    launch = items["launch"].to_numpy()
    replayed = (launch >= 0) & (rt[np.maximum(launch, 0)] == "cudaGraphLaunch")
    step0 = (items["step"] == 0).to_numpy()
    assert step0.sum() > 1000 and not replayed[step0].any()
    assert items["name"][step0].astype(str).str.startswith("triton_").sum() > 300
    share = items["share_ns"].to_numpy()
    for step in sorted(set(items["step"]) - {-1}):
        mine = (items["step"] == step).to_numpy()
        evidence = mine & (items["attribution"].astype(str) != Method.KERNEL_NAME.value).to_numpy()
        assert share[evidence].sum() / share[mine].sum() > 0.99
        lay = items["layer"].to_numpy()[mine]
        assert set(lay[lay >= 0]) == set(range(80))
        attn = items[mine & items["name"].astype(str).str.contains("FlashAttnFwdSm90").to_numpy()]
        assert Counter(attn["layer"]) == {i: 1 for i in range(80)}
        silu = items[mine & (items["name"].astype(str) == "triton_poi_fused_mul_silu_1").to_numpy()]
        assert sorted(silu["layer"]) == list(range(80)) and set(silu["module_bucket"].astype(str)) == {"mlp"}
    (pa,) = a.breakdown.attribution.phases
    assert [r.layer_type for r in pa.layers] == ["attention+dense"] * 80


@pytest.mark.parametrize("path", [SERVED_PREFILL, SERVED_DECODE], ids=["prefill-piecewise", "decode-full"])
def test_the_anchors_alone_agree_with_the_norm_cut(path, monkeypatch):
    """Where no fused norm cuts a step (a compiler that names its norms otherwise), the mixer/MoE anchor runs
    still find every layer: on the served traces, with the boundary kernels hidden, the layers agree with the norm
    cut's on 96.5% (prefill) and 93.2% (decode) of the GPU time: the anchors end a layer after its last MoE kernel,
    so what runs after it (the shared expert's tail) goes to the next layer, where the norm cut keeps it."""
    import phaseprof.analysis.attribution as attribution

    cut = _analyse(path)
    monkeypatch.setattr(attribution, "is_boundary", lambda names, rules: np.zeros(len(names), dtype=bool))
    anchored = _analyse(path)
    _check_35b(anchored)
    assert cut.prepared.items.index.equals(anchored.prepared.items.index)
    share = cut.prepared.items["share_ns"].to_numpy()
    same = cut.prepared.items["layer"].to_numpy() == anchored.prepared.items["layer"].to_numpy()
    assert share[same].sum() / share.sum() > 0.92


SHAPES = H200 / "shapes"


@pytest.mark.parametrize("path,n,layer_type", [
    (SHAPES / "llama-3.1-8b-eager-prefill-4096/trace.json.gz", 32, "attention+dense"),
    (SHAPES / "llama-3.1-8b-eager-decode-4096in-32out/trace.json.gz", 32, "attention+dense"),
    (SHAPES / "qwen3-30b-a3b-eager-prefill-4096/trace.json.gz", 48, "attention+moe"),
    (SHAPES / "qwen3-30b-a3b-eager-decode-4096in-32out/trace.json.gz", 48, "attention+moe"),
], ids=["llama-8b-prefill", "llama-8b-decode", "qwen3-30b-prefill", "qwen3-30b-decode"])
def test_eager_without_stacks_other_models_by_the_fused_norms(path, n, layer_type):
    """Eager models whose RMSNorm is vLLM's custom op (``vllm::fused_add_rms_norm_kernel``, 2 a layer): without
    their module scopes (these captures' hooks dropped in memory) the norm cut finds every layer, a dense MLP
    included, and places the layer's kernels where the module tree did (config from run.json)."""
    with_tree = _analyse(path, config=None)
    bare = _analyse(_without_stacks(path), config=None)
    for pa in bare.breakdown.attribution.phases:
        assert _evidence(pa) >= 98.0, pa.coverage_pct
        assert [r.layer for r in pa.layers] == list(range(n))
        assert {r.layer_type for r in pa.layers} == {layer_type}
    a, b = with_tree.prepared.items, bare.prepared.items
    share = a["share_ns"].to_numpy()
    same = a["layer"].to_numpy() == b["layer"].to_numpy()
    assert share[same].sum() / share.sum() > 0.97


@pytest.mark.public
def test_mode_names_the_compiled_step(public_dir):
    att = _analyse(public_dir / "traceMap__1_h100_1000isl_10osl_32con.pt.trace.json.gz",
                   config=LLAMA70B_CONFIG).breakdown.attribution
    assert att.mode == "piecewise graphs"
    assert att.mode_evidence.endswith("; 1 step(s) torch.compile'd without graphs (TorchInductor kernels launched "
                                      "directly: a batch above the largest capture size)")
