"""phaseprof diff on real pairs of traces.

- H100 vs MI300X, same vLLM workload (Llama-70B TP4, 1000 in / 10 out, 32 concurrent): the committed cut-down
  pair (traces/public-cut, always on) and the full public traces (``public`` tier).
- Eager vs CUDA-graph decode on the H200 (traces/h200, captured by the lead), else a CPU pair (traces/cpu).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from phaseprof.commands.main import main
from phaseprof.records import RunRecord
from phaseprof.report.diff import BreakdownDiff, KernelMatch, diff_breakdowns, load_side
from phaseprof.report.diff_markdown import MAX_CHARS, diff_markdown
from phaseprof.report.json_io import write_breakdown

from .builders import PUBLIC, PUBLIC_CUT, REPO

PAIRS = {
    "cut": (PUBLIC_CUT / "h100_vllm_llama70b_tp4_decode_2steps.json.gz",
            PUBLIC_CUT / "mi300x_vllm_llama70b_tp4_decode_2steps.json.gz"),
    "public": (PUBLIC / "traceMap__1_h100_1000isl_10osl_32con.pt.trace.json.gz",
               PUBLIC / "traceMap__1_mi300x_1000isl_10osl_32con.pt.trace.json.gz"),
}
NVIDIA_GEMM = re.compile(r"^(sm90_xmma|nvjet|void cutlass::Kernel2<cutlass_80|void cublasLt::splitKreduce)")
ROCM_GEMM = re.compile(r"^(Cijk_|void wvSplitK)")


@pytest.fixture(scope="module", params=[
    "cut", pytest.param("public", marks=pytest.mark.public)])
def vendor_pair(request, tmp_path_factory):
    a_path, b_path = PAIRS[request.param]
    for p in (a_path, b_path):
        if not p.exists():
            where = "committed cut-down fixtures" if request.param == "cut" else "../shared/traces/public"
            pytest.skip(f"{p} not present ({where})")
    a, b = load_side(a_path), load_side(b_path)
    d = diff_breakdowns(a.breakdown, b.breakdown, order_a=a.order, order_b=b.order)
    tmp = tmp_path_factory.mktemp(request.param)
    files = (write_breakdown(a.breakdown, tmp / "a.json"), write_breakdown(b.breakdown, tmp / "b.json"))
    return d, files


def _pairs(d: BreakdownDiff, bucket: str) -> list[KernelMatch]:
    return [m for m in d.phases[0].kernels if m.bucket == bucket and m.a and m.b]


def test_vendor_pair_is_flagged_as_different_gpu_same_shape(vendor_pair):
    d, _ = vendor_pair
    assert d.warnings == ["GPU differs: NVIDIA H100 80GB HBM3 (A) vs AMD Instinct MI300X (B)",
                          "platform differs: cuda/gpu (A) vs rocm/gpu (B)"]
    status = {c.aspect: c.status for c in d.comparability}
    assert status["world size"] == status["mode"] == status["phases"] == "same"  # TP4, graphs, same steps
    ph = d.phases[0]
    assert abs(ph.metric("kernels_per_step").rel_pct) < 15  # same model: kernel counts close


def test_gemm_kernels_matched_across_vendors_although_names_differ(vendor_pair):
    d, _ = vendor_pair
    cross = [m for m in _pairs(d, "gemm") if NVIDIA_GEMM.match(m.a.name) and ROCM_GEMM.match(m.b.name)]
    # module view: the projections' GEMMs stay gemm; the lm_head GEMM (once per step, last) ran for the
    # LogitsProcessor module (nn.Module events in these traces)
    assert len(cross) >= 4 and all(m.how == "order" for m in cross)
    assert {m.module for m in cross} == {"gemm", "LogitsProcessor"}
    assert [m.a.calls_per_step for m in cross if m.module == "LogitsProcessor"] == [1.0]
    gemm = next(r for r in d.phases[0].kernel_view if r.bucket == "gemm")
    # The biggest H100 GEMM (sm90 xmma, once per projection per layer) pairs with the ROCm kernel called as often.
    top = max(cross, key=lambda m: m.a.ms_per_step)
    assert top.a.name.startswith("sm90_xmma") and top.a.calls_per_step == top.b.calls_per_step
    assert sum(m.a.ms_per_step for m in _pairs(d, "gemm")) > 0.9 * gemm.time_ms.a


def test_communication_present_on_both_and_custom_allreduce_paired(vendor_pair):
    d, _ = vendor_pair
    comm = next(r for r in d.phases[0].kernel_view if r.bucket == "communication")
    assert comm.time_ms.a > 0 and comm.time_ms.b > 0
    assert comm.share.change > 10  # MI300X spends a far larger share of GPU busy in all-reduce
    assert any("cross_device_reduce_1stage<__nv_bfloat16" in m.a.name
               and "cross_device_reduce_1stage<__hip_bfloat16" in m.b.name for m in _pairs(d, "communication"))
    # FA3 on H100 does the decode attention paged_attention does on ROCm
    assert any("flash::" in m.a.name and "paged_attention_ll4mi" in m.b.name for m in _pairs(d, "attention"))


def test_fail_on_through_the_cli(vendor_pair, capsys):
    _, (a, b) = vendor_pair
    assert main(["diff", str(a), str(b), "-f", "json", "--fail-on", "communication.share > +2pp"]) == 1
    assert "FAIL unknown: communication.share > +2pp" in capsys.readouterr().err
    assert main(["diff", str(a), str(b), "-f", "json", "--fail-on", "gemm.share > +2pp",
                 "--fail-on", "kernels_per_step > +15%"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [(c["text"], c["failed"]) for c in doc["checks"]] == [("gemm.share > +2pp", False),
                                                                 ("kernels_per_step > +15%", False)]


def test_markdown_of_the_real_pair_renders(vendor_pair):
    d, _ = vendor_pair
    md = diff_markdown(d)
    tokens = MarkdownIt("commonmark").enable("table").parse(md)
    assert len(md) < MAX_CHARS
    assert sum(t.type == "table_open" for t in tokens) >= 6
    assert any(t.type == "html_block" and t.content.startswith("<details>") for t in tokens)


# ------------------------------------------------------------------------------ eager vs CUDA-graph decode
def _runs(root: Path) -> list[tuple[str, str, Path]]:
    """(mode, phase, run dir) of every run directory under ``root``: from run.json as the diff reads it,
    else from the directory name."""
    out = []
    for run in sorted(p.parent for p in root.rglob("run.json")):
        rec = RunRecord.read(run / "run.json")
        name = run.name.lower()
        mode = rec.execution_mode or next((m for m in ("eager", "graph") if m in name), "")
        phase = (rec.request.phase or ("decode" if "decode" in name else "")).lower()
        out.append((mode, phase, run))
    return out


def _eager_graph_pair() -> tuple[Path, Path, str]:
    for root, what in ((REPO / "traces/h200", "H200"), (REPO / "traces/cpu", "CPU")):
        if not root.is_dir():
            continue
        runs = _runs(root)
        eager = [r for m, ph, r in runs if m == "eager" and ph == "decode"]
        graph = [r for m, ph, r in runs if m == "graph" and ph == "decode"]
        if eager and graph:
            return eager[0], graph[0], what
    pytest.skip("no eager/graph decode pair of run directories under traces/h200/ (the lead's H200 captures "
                "land there) nor under traces/cpu/")


def test_graph_mode_cuts_launch_calls_per_decode_step_while_kernels_stay_close():
    eager, graph, what = _eager_graph_pair()
    a, b = load_side(eager), load_side(graph)
    d = diff_breakdowns(a.breakdown, b.breakdown, order_a=a.order, order_b=b.order)
    assert any(w.startswith("mode differs") for w in d.warnings)
    ph = d.phase("decode")
    assert ph is not None, f"{what}: no decode phase in both runs ({d.a.phases}, {d.b.phases})"
    launches = ph.metric("launches_per_step")
    if not launches.a:
        pytest.skip(f"{what} pair has no launch calls (CPU-only traces launch no GPU work)")
    assert launches.b < 0.2 * launches.a, f"graph mode should replace per-kernel launches: {launches}"
    # Graph mode also torch.compiles the model: inductor fuses elementwise kernels (H200: 2441 -> 1162 per decode
    # step), while the GEMM and MoE kernels stay exactly the same in count.
    kernels = ph.metric("kernels_per_step")
    assert kernels.b <= kernels.a, kernels
    counts = {r.bucket: r.count for r in ph.kernel_view}
    for bucket in ("gemm", "moe"):
        if bucket in counts:
            assert counts[bucket].a == counts[bucket].b > 0, (bucket, counts[bucket])


def test_eager_vs_graph_4096_prefill_pairs_identical_names_first() -> None:
    """On the committed H200 pair (``diff -f markdown`` eager vs graph 4096 prefill): the
    same nvjet GEMM and ``Memcpy DtoD`` were left unmatched, or paired with another kernel "by rank", because
    each side put them in a different bucket or module. Now they pair by name, and no kernel name found on both
    sides is paired with another one."""
    (eager,) = (REPO / "traces/h200/eager").glob("*-prefill-4096")
    (graph,) = (REPO / "traces/h200/graph").glob("*-prefill-4096")
    a, b = load_side(eager), load_side(graph)
    ph = diff_breakdowns(a.breakdown, b.breakdown, order_a=a.order, order_b=b.order).phase("prefill")
    assert ph is not None
    by_a = {m.a.name: m for m in ph.kernels if m.a}
    for name in ("nvjet_sm90_tst_128x64_64x8_1x2_h_bz_TNT", "Memcpy DtoD (Device -> Device)"):
        m = by_a[name]
        assert m.how == "name" and m.b is not None and m.b.name == name, (name, m.how, m.b)
    assert by_a["Memcpy DtoD (Device -> Device)"].group == "memory → memory/gdn"  # module: memory, then gdn
    both = {m.a.name for m in ph.kernels if m.a} & {m.b.name for m in ph.kernels if m.b}
    assert all(m.how == "name" for m in ph.kernels if m.a and m.a.name in both or m.b and m.b.name in both)
