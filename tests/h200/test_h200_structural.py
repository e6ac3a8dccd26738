"""Module + layer attribution of CUDA-graph replays from the replay alone, the model's layer plan (its
config) in place of an eager reference run (``analysis/structural.py``).

On the committed H200 graph traces: the 35B-A3B hybrid (40 layers: every fourth full attention, MoE in all) from
phaseprof's default capture (``traces/h200/hooks/graph-*``: config in run.json) and from vLLM's own profiler on a
graph run (``traces/h200/own-graph/``: no run.json, ``--model-config``); qwen3-30b-a3b (48 attention + MoE layers)
and llama-3.1-8b (32 dense layers) from the default capture (``traces/h200/shapes/``). Cross-checked against the
model config read here independently of phaseprof, against the eager-reference alignment (``--graph-reference``:
the 35B's eager captures, and eager captures of the two other models, ``traces/h200/shapes/*-eager-*``) and
against the kernels each layer must hold.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from phaseprof.analysis.attribution import agreement, differences
from phaseprof.analysis.attribution_types import Method
from phaseprof.analysis.layer_plan import LayerPlan, find_plan, plan_from_config
from phaseprof.analysis.pipeline import AnalysisConfig, analyze
from phaseprof.analysis.prepare import prepare
from phaseprof.analysis.verdict import view_notes
from phaseprof.classify.rules import load_rules
from phaseprof.commands.main import main
from phaseprof.presets import load_preset
from phaseprof.trace.read import load_tables

REPO = Path(__file__).resolve().parents[2]
H200 = REPO / "traces/h200"
PREFILL = H200 / "hooks/graph-prefill-4096/trace.json.gz"
DECODE = H200 / "hooks/graph-decode-4096in-32out-steps1-4/trace.json.gz"
EAGER = H200 / "hooks/eager-prefill-4096/trace.json.gz"
OWN = H200 / "own-graph/vllm-own-graph-prefill4096-decode1.pt.trace.json.gz"
OWN_EAGER = H200 / "own-eager/vllm-own-eager-prefill4096-decode1.pt.trace.json.gz"
SHAPES = H200 / "shapes"
ATTENTION_LAYERS = list(range(3, 40, 4))  # full_attention_interval 4
#: graph captures with the config in run.json: trace, and a kernel each layer runs once per step in its
#: feed-forward (MoE: its two expert GEMMs; dense: the fused SiLU-and-mul between gate_up and down)
DEFAULT_CAPTURES = {
    "35b-prefill": (PREFILL, "fused_moe_kernel", 2),
    "35b-decode": (DECODE, "fused_moe_kernel", 2),
    "qwen3-30b-prefill": (SHAPES / "qwen3-30b-a3b-prefill-4096/trace.json.gz", "fused_moe_kernel", 2),
    "qwen3-30b-decode": (SHAPES / "qwen3-30b-a3b-decode-4096in-32out/trace.json.gz", "fused_moe_kernel", 2),
    "llama-8b-prefill": (SHAPES / "llama-3.1-8b-prefill-4096/trace.json.gz", "mul_silu", 1),
    "llama-8b-decode": (SHAPES / "llama-3.1-8b-decode-4096in-32out/trace.json.gz", "mul_silu", 1),
}


def _analyse(path: Path, **kw):
    return analyze(path, config=AnalysisConfig.with_rules(None, **kw))


def _evidence_pct(pa) -> float:
    return 100.0 - pa.coverage_pct[Method.KERNEL_NAME.value]


def _types_from_config(cfg: dict) -> list[str]:
    """Each layer's type read from the raw Hugging Face config here, not through phaseprof's layer plan."""
    cfg = {**cfg, **cfg.get("text_config", {})}
    n = cfg["num_hidden_layers"]
    kinds = cfg.get("layer_types") or ["full_attention"] * n
    mixer = {"full_attention": "attention", "linear_attention": "gdn"}
    experts = cfg.get("num_experts") or cfg.get("num_local_experts") or 0
    step, dense = cfg.get("decoder_sparse_step") or 1, set(cfg.get("mlp_only_layers") or ())
    return [f"{mixer[kinds[i]]}+{'moe' if experts and i not in dense and (i + 1) % step == 0 else 'dense'}"
            for i in range(n)]


def _run_config(path: Path) -> dict:
    return json.loads((path.parent / "run.json").read_text())["model_config"]


def _check_layers(pa, cfg: dict) -> None:
    """All decoder layers found, each with the type the config gives it (phaseprof's plan and this test's reading)."""
    want = _types_from_config(cfg)
    plan = plan_from_config(cfg, source="test")
    assert [plan.layer_type(i) for i in range(plan.num_layers)] == want
    assert [r.layer for r in pa.layers] == list(range(len(want)))
    assert [r.layer_type for r in pa.layers] == want


def _kernels_per_layer(items: pd.DataFrame, step: int, needle: str) -> Counter:
    sub = items[(items["step"] == step) & items["name"].astype(str).str.contains(needle, regex=False)]
    return Counter(sub["layer"].tolist())


@pytest.mark.parametrize("path,ffn_kernel,per_layer", DEFAULT_CAPTURES.values(), ids=DEFAULT_CAPTURES.keys())
def test_default_capture_gets_module_and_layer_from_the_config(path, ffn_kernel, per_layer):
    a = _analyse(path)
    att = a.breakdown.attribution
    cfg = _run_config(path)
    types = _types_from_config(cfg)
    n = len(types)
    assert f"layer plan from run.json model_config: {n} layers" in att.graph_alignment
    assert att.phases
    for pa in att.phases:
        assert _evidence_pct(pa) >= 95.0, pa.coverage_pct
        assert pa.coverage_pct[Method.STRUCTURAL.value] > 50.0
        _check_layers(pa, cfg)
    items = a.prepared.items
    steps = sorted(set(items["step"]) - {-1})
    assert steps
    attention = [i for i, t in enumerate(types) if t.startswith("attention+")]
    for step in steps:
        # the cut is right, not off by one: each layer holds its own feed-forward and its mixer
        assert _kernels_per_layer(items, step, ffn_kernel) == {i: per_layer for i in range(n)}
        attn = _kernels_per_layer(items, step, "FlashAttnFwdSm90")
        gdn = _kernels_per_layer(items, step, "gated_delta_rule")
        assert sorted(attn) == attention and sorted(gdn) == [i for i in range(n) if i not in attention]
    placed = items[items["attribution"] == Method.STRUCTURAL.value]
    # outside the layers the plan names only the model's norm, one a step, and the LM head (the first GEMM after it)
    # where the module tree (these captures' hooks) did not name it already: the sampler and the runner's copies
    # keep their kernel view
    out = placed[placed["layer"] < 0]
    assert (out["module_bucket"] == "norm").sum() == len(steps)
    assert set(out["module_bucket"].astype(str)) <= {"norm", "LogitsProcessor"}
    assert set(out[out["module_bucket"] == "LogitsProcessor"]["kernel_bucket"].astype(str)) <= {"gemm"}
    placed = placed[placed["layer"] >= 0]
    # a kernel whose name says it is a component keeps it: no FlashAttention kernel is filed under moe
    assert not ((placed["kernel_bucket"] == "attention") & (placed["module_bucket"] != "attention")).any()
    ffn = placed[placed["name"].astype(str).str.contains(ffn_kernel, regex=False)]
    assert len(ffn) == per_layer * n * len(steps)
    if all(t.endswith("+dense") for t in types):  # a dense MLP: the bucket the module tree gives LlamaMLP
        assert set(zip(ffn["kernel_bucket"].astype(str), ffn["module_bucket"].astype(str))) == {("elementwise", "mlp")}
        # its two GEMMs too (gate_up before the SiLU-and-mul, down after it): three mlp kernels a layer, per step,
        # with the memsets launched among them (the eager module tree files them under LlamaMLP as well)
        mlp = placed[placed["module_bucket"] == "mlp"]
        assert set(mlp["kernel_bucket"].astype(str)) <= {"gemm", "elementwise", "memory"}
        kernels = mlp[mlp["kernel_bucket"] != "memory"].sort_values("ts_ns")
        per = kernels.groupby(["step", "layer"])["kernel_bucket"].apply(lambda s: tuple(s.astype(str)))
        assert set(per.index) == {(k, i) for k in steps for i in range(n)}
        (shape,) = set(per)  # the same in every layer; decode's down GEMM is split-K: + cuBLAS's splitKreduce
        assert shape in {("gemm", "elementwise", "gemm"), ("gemm", "elementwise", "gemm", "gemm")}
    else:
        assert set(ffn["module_bucket"]) == {"moe"}
        assert "mlp" not in set(items["module_bucket"].astype(str))


def test_vllm_own_profiler_trace_with_model_config():
    bare = _analyse(OWN).breakdown
    assert all(not pa.layers for pa in bare.attribution.phases)
    assert any("no layer plan for graph replays" in n for n in bare.notes)
    bd = _analyse(OWN, model_config="qwen3.5-35b-a3b").breakdown
    assert [pa.phase for pa in bd.attribution.phases] == ["prefill", "decode"]
    for pa in bd.attribution.phases:
        assert _evidence_pct(pa) >= 95.0, pa.coverage_pct
        _check_layers(pa, load_preset("qwen3.5-35b-a3b").config_dict())


#: (graph trace, eager reference of the same model, prompt and output lengths, --model-config)
REFERENCE_PAIRS = {
    "35b-default-capture": (PREFILL, EAGER, None),
    "35b-vllm-own": (OWN, OWN_EAGER, "qwen3.5-35b-a3b"),
    **{f"{model}-{phase.split('-')[0]}": (SHAPES / f"{model}-{phase}/trace.json.gz",
                                          SHAPES / f"{model}-eager-{phase}/trace.json.gz", None)
       for model in ("qwen3-30b-a3b", "llama-3.1-8b") for phase in ("prefill-4096", "decode-4096in-32out")},
}


@pytest.mark.parametrize("graph,eager,config", REFERENCE_PAIRS.values(), ids=REFERENCE_PAIRS.keys())
def test_agrees_with_the_eager_reference_alignment(graph, eager, config):
    att = _analyse(graph, graph_reference=eager, model_config=config).breakdown.attribution
    # the reference still decides (it is the cross-check); the layer plan's answer is compared with it
    assert all(pa.coverage_pct[Method.STRUCTURAL.value] == 0.0 for pa in att.phases)
    assert all(_evidence_pct(pa) >= 95.0 for pa in att.phases), att.graph_alignment
    if graph.parent.name != "llama-3.1-8b-prefill-4096":
        assert all(pa.coverage_pct[Method.GRAPH_ALIGNMENT.value] > 40.0 for pa in att.phases)
    else:  # the two runs picked other cuBLAS tiles for every GEMM: alignment pairs the memsets, bracketing the rest
        assert att.alignment_counts["paired"] == 4 * 32 and att.alignment_counts["bracketed_with_module"] > 0
    assert att.alignment_counts["structural_agreement_bp"] >= 9700, att.graph_alignment
    # the report says how far they agree, in the same figure, and where they differ
    said = re.search(r"\(layer, module\) agree on ([0-9.]+)% of the GPU time either attributed", att.graph_alignment)
    assert said and float(said.group(1)) == pytest.approx(att.alignment_counts["structural_agreement_bp"] / 100, abs=0.01)
    differ = re.search(r"they differ on (.*)$", att.graph_alignment)
    if att.alignment_counts["structural_agreement_bp"] < 10000:
        assert differ and "final vs layer plan: " in differ.group(1), att.graph_alignment


def test_a_dense_mlp_is_mlp_in_the_eager_module_tree_too():
    """The bucket structural attribution gives a dense feed-forward is the one the eager reference's module
    tree gives it: LlamaMLP and the calls inside it (gate_up linear, SiLU-and-mul, down linear) are mlp."""
    path = SHAPES / "llama-3.1-8b-eager-prefill-4096/trace.json.gz"
    a = _analyse(path)
    tree = a.prepared.attribution.tree
    by_class: dict[str, set] = {}
    for cls, label, layer in zip(tree.cls, tree.label, tree.layer):
        by_class.setdefault(cls, set()).add((label, int(layer) >= 0))
    assert by_class["LlamaMLP"] == by_class["MergedColumnParallelLinear"] == by_class["SiluAndMul"] == {("mlp", True)}
    assert by_class["RowParallelLinear"] == {("mlp", True), ("attention", True)}  # down_proj, o_proj
    assert set(tree.layer_types.values()) == {"attention+dense"} and len(tree.layer_types) == 32
    (pa,) = a.breakdown.attribution.phases
    assert [r.layer_type for r in pa.layers] == ["attention+dense"] * 32
    assert all(r.by_bucket_us["mlp"] > 0 for r in pa.layers)
    # class names outside the layers stay class names (not buckets), and the report says so
    mv = {b.bucket for ph in a.breakdown.phases for b in ph.module_view}
    assert {"mlp", "LogitsProcessor", "VocabParallelEmbedding"} <= mv and "LlamaMLP" not in mv
    assert view_notes(a.breakdown.phases[0])[-1] == ("module view: LogitsProcessor, VocabParallelEmbedding = module "
                                                     "class(es) outside the decoder layers that no rule names")


def test_agreement_counts_time_on_differing_layer_or_module():
    items = pd.DataFrame({"share_ns": [10, 30, 60, 5]})
    compared = np.array([True, True, True, False])
    module = np.array(["gdn", "moe", "moe", "x"], dtype=object)
    layer = np.array([0, 0, 1, -1])
    same = agreement(items, compared=compared, module=module, layer=layer,
                     s_label=np.array(["gdn", "moe", "moe", None], dtype=object), s_layer=np.array([0, 0, 1, 3]))
    assert same == 100.0
    off = agreement(items, compared=compared, module=module, layer=layer,
                    s_label=np.array(["gdn", "attention", "moe", None], dtype=object), s_layer=np.array([0, 0, 0, -1]))
    assert off == pytest.approx(10.0)


def test_differences_say_where_layer_or_module_differ():
    items = pd.DataFrame({"share_ns": [10, 30, 50, 10, 5]})
    compared = np.array([True, True, True, True, False])
    module = np.array(["norm", "moe", "mlp", "norm", "x"], dtype=object)
    layer = np.array([47, 0, 1, -1, -1])
    kw = dict(compared=compared, module=module, layer=layer)
    assert differences(items, **kw, s_label=module.copy(), s_layer=layer.copy()) == ""
    said = differences(items, **kw, s_label=np.array(["norm", "moe", "gemm", None, None], dtype=object),
                       s_layer=np.array([-1, 0, 1, 0, 3]))
    assert said == ("they differ on the layer of 2 kernel(s), 20.00% (final vs layer plan: layer 47 vs outside "
                    "10.00%, outside vs layer 0 10.00%) and the module of 1 kernel(s), 50.00% (final vs layer plan: "
                    "mlp vs gemm 50.00%)")


def test_a_plan_of_another_depth_is_reported_never_forced():
    a = _analyse(PREFILL, model_config="qwen3-30b-a3b").breakdown  # 48 layers
    att = a.attribution
    assert all(not pa.layers and pa.coverage_pct[Method.STRUCTURAL.value] == 0.0 for pa in att.phases)
    assert any("left alone: 80 fused add-RMSNorm kernels" in n and "48 layers need 96" in n for n in a.notes)


def test_layer_types_come_from_the_kernels_and_a_contradiction_is_noted():
    t = load_tables(PREFILL)
    wrong = LayerPlan(mixers=("attention",) * 40, ffns=("moe",) * 40, source="test")
    prep = prepare(t, load_rules(), plan=wrong)
    notes = prep.attribution.notes
    assert notes == ("layer plan contradicted: layers 0, 1, 2, 4, 5, 6, 8, 9 and 22 more: the config says "
                     "attention+moe, their kernels show gdn+moe (in up to 1 of 1 step(s)); the kernels' type is shown",)
    assert [i for i, ty in prep.attribution.layer_types.items() if ty == "attention+moe"] == ATTENTION_LAYERS


def test_plans_of_the_presets():
    def plan(name: str) -> LayerPlan:
        return plan_from_config(load_preset(name).config_dict(), source=name)

    hybrid = plan("qwen3.5-35b-a3b")
    assert hybrid.num_layers == 40 and [i for i in range(40) if hybrid.mixers[i] == "attention"] == ATTENTION_LAYERS
    assert set(hybrid.ffns) == {"moe"}
    moe = plan("qwen3-30b-a3b")
    assert moe.num_layers == 48 and {moe.layer_type(i) for i in range(48)} == {"attention+moe"}
    dense = plan("llama-3.1-8b")
    assert dense.num_layers == 32 and {dense.layer_type(i) for i in range(32)} == {"attention+dense"}
    cfg = load_preset("qwen3-30b-a3b").config_dict()
    cfg.update(mlp_only_layers=[0], decoder_sparse_step=2)
    sparse = plan_from_config(cfg, source="edited")
    assert [i for i in range(6) if sparse.ffns[i] == "moe"] == [1, 3, 5]


def test_where_the_plan_comes_from(tmp_path):
    from phaseprof.records import ModelInfo, RunRecord

    assert find_plan(explicit=None, records=(), trace_path=str(PREFILL))[1] == "run.json model_config"
    assert find_plan(explicit=None, records=(), trace_path=str(OWN)) == (None, "no model config (run.json, "
                                                                         "--model-config)")
    named = RunRecord(model=ModelInfo(name="qwen3-30b-a3b"))
    assert find_plan(explicit=None, records=(named,), trace_path=None)[0].num_layers == 48
    plan, why = find_plan(explicit=None, records=(RunRecord(model_config={"num_hidden_layers": 4}),),
                          trace_path=None)
    assert plan is None and "not usable for the layer plan" in why


def test_by_layer_prints_the_layers_of_a_graph_trace(capsys):
    assert main(["analyze", str(PREFILL), "--by", "layer"]) == 0
    out = capsys.readouterr().out
    assert "layer plan" in out  # the coverage line names the method
    assert "prefill: per layer (ms in all steps)" in out
    for line in out.splitlines():
        assert len(line) <= 80 or "│" not in line


def test_by_layer_shows_the_dense_mlp_column_only_for_a_dense_model(capsys):
    assert main(["analyze", str(SHAPES / "llama-3.1-8b-prefill-4096/trace.json.gz"), "--by", "layer"]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.split()[:2] == ["layer", "type"])
    assert header.split()[-2:] == ["mlp", "rest"]
    assert main(["analyze", str(PREFILL), "--by", "layer"]) == 0
    header = next(line for line in capsys.readouterr().out.splitlines() if line.split()[:2] == ["layer", "type"])
    assert "mlp" not in header.split()


def test_diff_of_two_graph_captures_compares_per_layer():
    from phaseprof.report.diff import diff_breakdowns, load_side

    graph_dir = next((H200 / "graph").glob("*-prefill-4096"))
    a, b = load_side(PREFILL), load_side(graph_dir / "trace.json.gz")  # hooks vs no hooks: same GPU work
    d = diff_breakdowns(a.breakdown, b.breakdown, order_a=a.order, order_b=b.order)
    (prefill,) = [p for p in d.phases if p.phase == "prefill"]
    assert [x.metric for x in prefill.layers][:4] == ["layer 0 gdn+moe", "layer 1 gdn+moe", "layer 2 gdn+moe",
                                                   "layer 3 attention+moe"]
    assert len(prefill.layers) == 40
    # the same model on the same GPU: every layer within 10% of the other capture's
    assert all(abs(x.b - x.a) <= 0.1 * x.a for x in prefill.layers)


def test_diff_of_vllm_own_graph_trace_per_layer_with_model_config(capsys):
    """vLLM's own trace records no model: diff's --model-config gives its layer plan too."""
    assert main(["diff", str(PREFILL), str(OWN), "--model-config", "qwen3.5-35b-a3b", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (prefill,) = [p for p in doc["diff"]["phases"] if p["phase"] == "prefill"]
    assert len(prefill["layers"]) == 40 and prefill["layers"][3]["metric"] == "layer 3 attention+moe"
