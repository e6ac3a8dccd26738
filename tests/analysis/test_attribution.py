"""Module-tree, per-layer and graph-replay attribution, on real traces and tiny inline ones.

Real fixtures:
- traces/cpu/vllm-own-stack/: vLLM 0.28 CPU's own profiler (with_stack=True) on the tiny-hybrid preset
  (3 Gated DeltaNet layers + 1 full-attention layer, MoE in every layer), python_function events other than
  ``nn.Module:`` removed (README there).
- traces/graph-pair/tracelens_vllm_decode_full_*: TraceLens's public FULL-graph decode replay of gpt-oss-20b on
  MI300X and its graph-capture trace (cut: only the events phaseprof reads).
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import numpy as np
import pytest

from phaseprof.analysis.attribution_types import Method
from phaseprof.analysis.modules import build_module_tree, load_layer_rules
from phaseprof.analysis.phase_infer import load_phase_evidence
from phaseprof.analysis.pipeline import analyze_trace
from phaseprof.classify.rules import load_rules
from phaseprof.trace.read import load_tables
from tests.builders import TraceBuilder

REPO = Path(__file__).resolve().parents[2]
CPU_STACK = REPO / "traces/cpu/vllm-own-stack/tiny-hybrid-eager-prefill64-decode1.pt.trace.json.gz"
REPLAY = REPO / "traces/graph-pair/tracelens_vllm_decode_full_replay.json.gz"
CAPTURE = REPO / "traces/graph-pair/tracelens_vllm_decode_full_capture_cut.json.gz"


@pytest.fixture(scope="module")
def cpu_bd():
    return analyze_trace(CPU_STACK)


# --- the module tree on a real vLLM trace recorded with stacks ---------------------------------------------

def test_module_tree_labels_and_layers_from_real_classes():
    t = load_tables(CPU_STACK)
    tree = build_module_tree(t.modules, load_rules())
    by_class = {}
    for cls, label, layer in zip(tree.cls, tree.label, tree.layer):
        by_class.setdefault(cls, set()).add((label, int(layer) >= 0))
    assert by_class["GemmaRMSNorm"] >= {("norm", True)}  # the layers' norms (the final norm is outside)
    assert by_class["QwenGatedDeltaNetAttention"] == {("gdn", True)}
    assert by_class["RMSNormGated"] == {("gdn", True)}  # GDN's gated output norm belongs to GDN
    assert by_class["MergedColumnParallelLinear"] == {("gdn", True), ("moe", True)}  # a linear: its block decides
    assert by_class["QKVParallelLinear"] == {("attention", True)}
    assert by_class["LogitsProcessor"] == {("LogitsProcessor", False)}  # no rule: shown under its own name
    # the MoE block's shared expert is an MLP class, but its block's rule comes first: moe, never the dense mlp
    assert by_class["Qwen2MoeMLP"] == {("moe", True)}
    # layer types from what runs inside each decoder layer: the preset's 3 linear_attention + 1 full_attention
    assert tree.layer_types == {0: "gdn+moe", 1: "gdn+moe", 2: "gdn+moe", 3: "attention+moe"}


def test_per_layer_view_has_every_decoder_layer_in_every_phase(cpu_bd):
    a = cpu_bd.attribution
    assert a.module_calls > 0 and "Qwen3NextDecoderLayer" in a.module_classes
    assert {p.phase for p in a.phases} == {"prefill", "decode"}
    for pa in a.phases:
        assert [r.layer for r in pa.layers] == [0, 1, 2, 3]
        for r in pa.layers:
            kind = "attention" if r.layer == 3 else "gdn"
            other = "gdn" if kind == "attention" else "attention"
            assert r.by_bucket_us[kind] > 0 and other not in r.by_bucket_us
            assert r.by_bucket_us["moe"] > 0 and r.by_bucket_us["norm"] > 0
            assert r.time_us == pytest.approx(sum(r.by_bucket_us.values()))
        ph = next(p for p in cpu_bd.phases if p.phase == pa.phase)
        in_layers = sum(r.time_us for r in pa.layers)
        assert in_layers + pa.outside_layers_us == pytest.approx(ph.gpu_busy_us, rel=1e-9)


def test_coverage_adds_up_and_the_module_tree_carries_most_of_it(cpu_bd):
    for pa in cpu_bd.attribution.phases:
        assert sum(pa.coverage_pct.values()) == pytest.approx(100.0)
        assert set(pa.coverage_pct) == {m.value for m in Method}
        assert pa.coverage_pct[Method.MODULE_TREE] > 30  # the norms, linears and ATen glue no op rule names
        assert pa.coverage_pct[Method.KERNEL_NAME] < 10


def _self_times(ops: list[dict]) -> list[tuple[float, float, float, int]]:
    """(start, end, self time, tid) of CPU ops: duration minus direct children, nesting per thread (a plain
    stack sweep, written here independently of phaseprof's)."""
    out = []
    by_tid: dict[int, list[dict]] = {}
    for e in ops:
        by_tid.setdefault(e["tid"], []).append(e)
    for tid, evs in by_tid.items():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        self_t = [e["dur"] for e in evs]
        stack: list[int] = []
        for i, e in enumerate(evs):
            while stack and evs[stack[-1]]["ts"] + evs[stack[-1]]["dur"] <= e["ts"]:
                stack.pop()
            if stack:
                self_t[stack[-1]] -= e["dur"]
            stack.append(i)
        out += [(e["ts"], e["ts"] + e["dur"], max(s, 0.0), tid) for e, s in zip(evs, self_t)]
    return out


def test_norm_equals_the_time_of_ops_under_rmsnorm_modules_from_raw_events(cpu_bd):
    """Acceptance on the committed real trace: module-view norm = self time of the CPU ops running
    inside ``*RMSNorm_N`` modules (GemmaRMSNorm; not RMSNormGated, GDN's gate), summed from the raw JSON."""
    events = json.loads(gzip.decompress(CPU_STACK.read_bytes()))["traceEvents"]
    norms = [(e["ts"], e["ts"] + e["dur"], e["tid"]) for e in events if e.get("cat") == "python_function"
             and re.fullmatch(r"nn\.Module: \w*RMSNorm_\d+", e["name"])]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in events
             if e.get("cat") == "user_annotation" and e["name"].startswith("execute_context_")]
    ops = [e for e in events if e.get("cat") == "cpu_op"]
    total_us = 0.0
    for ts, end, self_us, tid in _self_times(ops):
        if any(a <= ts and end <= b for a, b in steps) and any(a <= ts < b and t == tid for a, b, t in norms):
            total_us += self_us
    norm_us = sum(b.time_us for ph in cpu_bd.phases for b in ph.module_view if b.bucket == "norm")
    assert total_us > 0
    assert norm_us == pytest.approx(total_us, rel=0.05)
    # ... while the kernel view has no norm at all: GemmaRMSNorm is plain ATen ops on this engine
    assert not any(b.bucket == "norm" for ph in cpu_bd.phases for b in ph.kernel_view)


# --- CUDA-graph replay: the public TraceLens replay/capture pair -----------------------------------------------

def test_replayed_kernels_get_the_captures_modules():
    plain = analyze_trace(REPLAY)
    aligned = analyze_trace(REPLAY, graph_reference=CAPTURE)
    pa0, pa = plain.attribution.phases[0], aligned.attribution.phases[0]
    assert pa0.coverage_pct[Method.GRAPH_ALIGNMENT] == 0.0
    assert "kernel-name fallback" in plain.attribution.graph_alignment
    # 421 replayed kernels, all paired with the 421 captured launches by name and order
    counts = aligned.attribution.alignment_counts
    assert counts["replayed"] == counts["replayed_paired"] == 421
    assert 0 < counts["with_module"] < counts["paired"]
    # those whose capture-time launch ran inside a named op (vllm::moe_forward, unified attention, rms norm)
    # take its bucket; kernels inside torch.compile's GraphModule keep the kernel view, and say so
    assert pa.coverage_pct[Method.GRAPH_ALIGNMENT] > 80
    assert pa.coverage_pct[Method.KERNEL_NAME] < pa0.coverage_pct[Method.KERNEL_NAME]
    mv = {b.bucket: b.time_us for b in aligned.phases[0].module_view}
    assert mv["moe"] > 0 and mv["attention"] > 0 and "GraphModule" not in mv


# Real kernel names (traces/h200/plain), in a synthetic capture/replay pair that pins the alignment down.
NORM_A, NORM_B = "triton_poi_fused_6", "triton_poi_fused_5"
GATE = "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT"


def _graph_pair(tmp_path: Path) -> tuple[Path, Path]:
    """A capture with named launches inside modules, and a replay of the same kernels plus two the capture
    lacks."""
    cap = TraceBuilder()
    cap.op("nn.Module: Qwen3NextDecoderLayer_0", 0, 100)
    cap.op("nn.Module: GemmaRMSNorm_0", 1, 9)
    cap.op("nn.Module: Qwen3NextSparseMoeBlock_0", 20, 70)
    cap.runtime("cudaStreamBeginCapture", 0.5, 0.1)
    for name, ts in [(NORM_A, 2), (NORM_B, 4), (GATE, 21), ("fused_moe_kernel", 30)]:
        cap.runtime("hipLaunchKernel", ts, 0.5)
        cap.events[-1]["args"]["kernel"] = name
    cap.runtime("cudaStreamEndCapture", 95, 0.1)
    for e in cap.events:
        if e["cat"] == "cpu_op" and e["name"].startswith("nn.Module"):
            e["cat"] = "python_function"
    rep = TraceBuilder()
    c = rep.runtime("hipGraphLaunch", 0, 5)
    for i, name in enumerate([NORM_A, NORM_B, "triton_poi_fused_0", GATE, "triton_poi_fused_4", "fused_moe_kernel"]):
        rep.kernel(name, 10 + 10 * i, 5, c)
    return cap.write(tmp_path / "cap.json"), rep.write(tmp_path / "rep.json")


def test_alignment_by_name_and_order_skips_what_the_capture_lacks(tmp_path):
    cap, rep = _graph_pair(tmp_path)
    from phaseprof.analysis.pipeline import AnalysisConfig, analyze

    items = analyze(rep, config=AnalysisConfig(graph_reference=cap)).prepared.items.sort_values("ts_ns")
    assert items["kernel_bucket"].tolist() == ["elementwise"] * 3 + ["gemm", "elementwise", "moe"]
    # the two the capture lacks are bracketed: the one between the norm and the MoE block (two blocks, no boundary
    # kernel between them) takes layer 0 but keeps its kernel view; the one between two kernels of the MoE block of
    # layer 0 ran for that block
    assert items["module_bucket"].tolist() == ["norm", "norm", "elementwise", "moe", "moe", "moe"]
    assert items["attribution"].tolist() == ["graph_alignment"] * 2 + ["bracketed", "graph_alignment",
                                                                       "bracketed", "graph_alignment"]
    assert items["layer"].tolist() == [0, 0, 0, 0, 0, 0]


# --- empty steps, rules data -------------------------------------------------------------------------------------

def test_empty_trailing_vllm_step_is_dropped_and_counted(tmp_path):
    b = TraceBuilder()
    b.annotation("execute_context_1(16)_generation_0(0)", 0, 100)
    b.launch("fused_moe_kernel", 10, 2, 20, 30)
    b.annotation("execute_context_0(0)_generation_1(1)", 200, 100)
    b.launch("fused_moe_kernel", 210, 2, 220, 30)
    b.annotation("execute_context_0(0)_generation_0(0)", 400, 50)
    bd = analyze_trace(b.write(tmp_path / "t.json"))
    assert [s.phase for s in bd.steps] == ["prefill", "decode"]
    assert bd.attribution.empty_steps_dropped == 1
    assert any("1 empty step(s) dropped" in n for n in bd.notes)


def test_layer_and_phase_rules_load_and_their_examples_match():
    lr = load_layer_rules()
    assert lr.is_layer("Qwen3NextDecoderLayer") and not lr.is_layer("Qwen3NextSparseMoeBlock")
    assert lr.is_opaque("GraphModule")
    phases = {ph for ph, _ in load_phase_evidence()}
    assert phases == {"prefill", "decode"}


def test_layer_of_a_kernel_outside_layers_is_minus_one(cpu_bd):
    t = load_tables(CPU_STACK)
    tree = build_module_tree(t.modules, load_rules())
    outside = tree.layer[np.asarray([c in ("LogitsProcessor", "Sampler", "VocabParallelEmbedding")
                                     for c in tree.cls])]
    assert outside.size and (outside == -1).all()


@pytest.mark.parametrize(("run", "mode"), [
    ("eager/20261130T094724Z-h200-qwen3.5-35b-a3b-prefill-4096", "eager"),
    ("graph/20261130T094740Z-h200-qwen3.5-35b-a3b-prefill-4096", "piecewise graphs"),  # 4K: 41 pieces
    ("graph/20261130T094743Z-h200-qwen3.5-35b-a3b-decode-128in-32out", "full and piecewise graphs"),
])
def test_mode_inferred_from_the_trace_matches_how_it_was_recorded(run, mode):
    """The committed H200 captures: vLLM 0.23 eager, and graph mode (FULL_AND_PIECEWISE: a piecewise prefill,
    full-graph decode steps); run.json records the mode, the analysis reads only the trace."""
    bd = analyze_trace(REPO / "traces/h200" / run / "trace.json.gz")
    assert bd.attribution.mode == mode
    recorded = json.loads((REPO / "traces/h200" / run / "run.json").read_text())
    assert json.dumps(recorded).count('"enforce_eager": true') == (1 if mode == "eager" else 0)


def test_diff_shows_coverage_and_layers(cpu_bd):
    from phaseprof.report.diff import diff_breakdowns
    from phaseprof.report.diff_markdown import diff_markdown

    plain = analyze_trace(REPO / "traces/cpu/tiny-hybrid-prefill128-decode8/trace.json.gz")  # no stacks
    d = diff_breakdowns(cpu_bd, plain)
    assert "module view basis differs: module tree (A) vs op stack (B)" in d.warnings
    dec = d.phase("decode")
    cov = {x.metric: x for x in dec.coverage}
    assert cov["module_tree"].a > 30 and cov["module_tree"].b == 0.0
    assert dec.layers == ()  # B has no module tree: no layer comparison
    same = diff_breakdowns(cpu_bd, cpu_bd).phase("decode")
    assert [x.metric for x in same.layers] == ["layer 0 gdn+moe", "layer 1 gdn+moe", "layer 2 gdn+moe",
                                                "layer 3 attention+moe"]
    assert all(x.change == 0 for x in same.layers)
    assert "| decoder layer (ms/step) |" in diff_markdown(diff_breakdowns(cpu_bd, cpu_bd), max_chars=10 ** 6)


@pytest.mark.parametrize(("extra", "says"), [
    (["--by", "module"], "unknown --by 'module' (supported: layer)"),
    (["--graph-reference", "no-such-capture.json.gz"], "no-such-capture.json.gz: no such file"),
])
def test_bad_attribution_options_are_one_clear_line(extra, says, capsys):
    from phaseprof.commands.main import main

    rc = main(["analyze", str(REPLAY), *extra])
    out, err = capsys.readouterr()
    assert rc == 2 and says in err and len(err.strip().splitlines()) == 1


def test_by_layer_prints_the_layer_table_within_80_columns(capsys, monkeypatch):
    from phaseprof.commands.main import main

    monkeypatch.setenv("COLUMNS", "80")
    assert main(["analyze", str(CPU_STACK), "--by", "layer"]) in (0, None)
    out = capsys.readouterr().out
    assert "decode: per layer (ms in all steps)" in out and "attn+moe" in out and "gdn+moe" in out
    assert "decode module view from: op stack" in out
    table = out[out.index("decode: per layer"):].splitlines()
    assert max(len(line) for line in table) <= 80


def test_by_layer_splits_rather_than_cuts_when_narrow(capsys, monkeypatch):
    from phaseprof.commands.main import main

    monkeypatch.setenv("COLUMNS", "50")
    assert main(["analyze", str(CPU_STACK), "--by", "layer"]) in (0, None)
    table = capsys.readouterr().out
    table = table[table.index("decode: per layer"):].splitlines()
    assert max(len(line) for line in table) <= 50
    assert not any("…" in line for line in table)  # rich's cut mark
    assert re.search(r"part\s+2/", " ".join(table))  # the bucket columns went to a second part (title may wrap)


def test_pairing_is_anchored_so_a_fused_layer_does_not_shift_the_next_ones():
    from phaseprof.analysis.graph_align import pair_sequences

    # reference (eager): per layer G(emm) N(orm op) N M(oe); replay (compiled): G F(used norm) M per layer
    G, N, M, F = 1, 2, 3, 4
    ref = [G, N, N, M] * 3
    rep = [G, F, M] * 3
    pairs = pair_sequences(rep, ref)
    assert pairs == [(0, 0), (2, 3), (3, 4), (5, 7), (6, 8), (8, 11)]  # k-th G with k-th G, k-th M with k-th M
    assert all(rep[i] == ref[j] for i, j in pairs)


def test_graph_reference_may_be_a_run_directory(tmp_path):
    from phaseprof.analysis.pipeline import load_reference
    from phaseprof.errors import PhaseprofError

    cap, _ = _graph_pair(tmp_path)
    run = tmp_path / "run"
    run.mkdir()
    cap.rename(run / "trace.json")
    rules = load_rules()
    segs, name, _ = load_reference(run, rules)
    assert name == "trace.json" and [s.names for s in segs] == [(NORM_A, NORM_B, GATE, "fused_moe_kernel")]
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(PhaseprofError, match="not a run directory"):
        load_reference(empty, rules)


def test_kernels_and_module_scopes_without_any_runtime_call(tmp_path):
    """A cut or broken trace: GPU kernels and nn.Module scopes but no runtime call at all. The module view has no
    launch to follow (every kernel unattributed to a module), and the analysis ends normally: it once indexed row
    0 of the empty runtime table (IndexError, a traceback and exit 1; found by a longer fuzz campaign, seed 7)."""
    from phaseprof.analysis.invariants import broken_invariants

    doc = json.loads(gzip.decompress((REPO / "traces/h200/hooks/eager-prefill-4096/trace.json.gz").read_bytes()))
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") not in ("cuda_runtime", "cuda_driver")]
    path = tmp_path / "no-runtime.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    t = load_tables(path)
    assert len(t.runtime) == 0 and len(t.gpu) > 0 and len(t.modules) > 0
    bd = analyze_trace(path)
    assert not broken_invariants(bd)
