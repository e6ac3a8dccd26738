"""Module + layer attribution of CUDA-graph replays from the replay alone (the model's layer plan).

On the committed H200 graph traces, per phase: GPU time whose module view rests on evidence (not the kernel-name
fallback; the acceptance figure), of it the share inside decoder layers and the share with a named module (a
component bucket, the dense MLP's ``mlp``, or a module class such as ``LogitsProcessor``; not a kernel-view
bucket such as ``gemm``), decoder layers found and their types against the config, and, where an eager
reference with a module tree is committed, the (layer, module) agreement of the structural method with
``--graph-reference``'s alignment. Time, CPU time of this process (steadier than wall on shared cores), rounds
interleaved, best of ``--repeat``, with the layer plan vs without it (today's kernel-name fallback on the same
trace), both in the same run: ``prepare`` on tables already loaded (what the method changes), and the whole
``analyze`` (load, prepare, summarize: what a user waits for; without a plan it is the same three calls with
``plan=None``).

    python benchmarks/bench_structural.py                 # the committed traces
    python benchmarks/bench_structural.py --repeat 7 --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from phaseprof.analysis.layer_plan import find_plan  # noqa: E402
from phaseprof.analysis.pipeline import AnalysisConfig, analyze, load_reference  # noqa: E402
from phaseprof.analysis.prepare import prepare  # noqa: E402
from phaseprof.analysis.breakdown import summarize  # noqa: E402
from phaseprof.analysis.invariants import checked  # noqa: E402
from phaseprof.classify.rules import load_rules  # noqa: E402
from phaseprof.trace.read import load_tables  # noqa: E402

ROOT = Path(__file__).resolve().parents[1] / "traces" / "h200"


def _shape(model: str, phase: str) -> tuple[Path, None, Path]:
    """A graph capture of traces/h200/shapes/ and the eager reference of the same model beside it."""
    return (ROOT / f"shapes/{model}-{phase}/trace.json.gz", None, ROOT / f"shapes/{model}-eager-{phase}/trace.json.gz")


#: (name, graph trace, --model-config or None for run.json's, eager reference with a module tree or None)
CASES = [
    ("default capture 4K prefill (hooks)", ROOT / "hooks/graph-prefill-4096/trace.json.gz", None,
     ROOT / "hooks/eager-prefill-4096/trace.json.gz"),
    ("default capture decode 4096+32 (hooks)", ROOT / "hooks/graph-decode-4096in-32out-steps1-4/trace.json.gz",
     None, None),
    ("vLLM's own profiler, served graph run", ROOT / "own-graph/vllm-own-graph-prefill4096-decode1.pt.trace.json.gz",
     "qwen3.5-35b-a3b", ROOT / "own-eager/vllm-own-eager-prefill4096-decode1.pt.trace.json.gz"),
    ("graph capture without hooks, 128+32 decode",
     next(ROOT.glob("graph/*decode-128in-32out/trace.json.gz")), None, None),
    *((f"{model} default capture {what}", *_shape(model, phase))
      for model in ("qwen3-30b-a3b", "llama-3.1-8b")
      for what, phase in (("4K prefill", "prefill-4096"), ("decode 4096+32", "decode-4096in-32out"))),
]
#: module-view labels that only repeat the kernel view: no module named (components and class names are)
KERNEL_VIEW_ONLY = frozenset({"gemm", "elementwise", "quant", "memory", "other", "unknown"})


def _analyze_without_plan(path: Path, rules) -> None:  # noqa: ANN001
    """``pipeline.analyze`` as it runs when no layer plan is found: load, prepare (kernel-name fallback for
    graph-replayed kernels), summarize, check."""
    t = load_tables(path)
    checked(summarize(t, prepare(t, rules)))


def _shares(a, phase: str) -> tuple[float, float]:  # noqa: ANN001
    """(% of the phase's item time inside a decoder layer, % with a named module) for one phase."""
    steps = {s.index for s in a.breakdown.steps if s.phase == phase}
    it = a.prepared.items
    it = it[it["step"].isin(steps)]
    total = float(it["share_ns"].sum()) or 1.0
    named = ~it["module_bucket"].astype(str).isin(KERNEL_VIEW_ONLY)
    return (round(100.0 * float(it.loc[it["layer"] >= 0, "share_ns"].sum()) / total, 2),
            round(100.0 * float(it.loc[named, "share_ns"].sum()) / total, 2))


def _cpu(fn) -> float:  # noqa: ANN001
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def run(repeat: int) -> list[dict]:
    rules = load_rules()
    out = []
    for name, path, mc, ref in CASES:
        config = AnalysisConfig.with_rules(None, model_config=mc)
        analysed = analyze(path, config=config, ruleset=rules)
        bd = analysed.breakdown
        row: dict = {"case": name, "trace": str(path.relative_to(ROOT.parents[1])), "phases": {}}
        for pa in bd.attribution.phases:
            types = [r.layer_type for r in pa.layers]
            in_layers, named = _shares(analysed, pa.phase)
            row["phases"][pa.phase] = {"evidence_pct": round(100.0 - pa.coverage_pct["kernel_name"], 2),
                                       "structural_pct": round(pa.coverage_pct["structural"], 2),
                                       "in_layers_pct": in_layers, "named_module_pct": named,
                                       "layers": len(pa.layers), "types": {t: types.count(t) for t in set(types)}}
        if ref is not None:
            cfg = AnalysisConfig.with_rules(None, model_config=mc, graph_reference=ref)
            a = analyze(path, config=cfg, ruleset=rules).breakdown.attribution
            row["agreement_pct"] = a.alignment_counts.get("structural_agreement_bp", 0) / 100
        t = load_tables(path)
        plan, _ = find_plan(explicit=mc, records=(t.meta.capture,), trace_path=t.meta.path)
        assert plan is not None, path
        times = {"plan": [], "no plan": [], "analyze plan": [], "analyze no plan": []}
        for _ in range(repeat):
            times["plan"].append(_cpu(lambda: prepare(t, rules, plan=plan)))
            times["no plan"].append(_cpu(lambda: prepare(t, rules)))
            times["analyze plan"].append(_cpu(lambda: analyze(path, config=config, ruleset=rules)))
            times["analyze no plan"].append(_cpu(lambda: _analyze_without_plan(path, rules)))
        if ref is not None:
            refseg = load_reference(ref, rules)
            times["reference"] = [_cpu(lambda: prepare(t, rules, reference=refseg)) for _ in range(repeat)]
        best = {k: min(v) for k, v in times.items()}
        row["cpu_s"] = {k: round(v, 3) for k, v in best.items()}
        row["plan_vs_no_plan"] = round(best["plan"] / best["no plan"], 3)
        row["analyze_plan_vs_no_plan"] = round(best["analyze plan"] / best["analyze no plan"], 3)
        out.append(row)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rows = run(args.repeat)
    for r in rows:
        print(f"{r['case']}  ({r['trace']})")
        for ph, p in r["phases"].items():
            print(f"  {ph:8s} module/layer from evidence {p['evidence_pct']:6.2f}% (layer plan {p['structural_pct']:.2f}%"
                  f"; in layers {p['in_layers_pct']:.2f}%, module named {p['named_module_pct']:.2f}%)"
                  f", {p['layers']} layers {p['types']}")
        if "agreement_pct" in r:
            print(f"  agreement with --graph-reference: {r['agreement_pct']:.2f}% of GPU time by (layer, module)")
        print(f"  analysis CPU s (best of {args.repeat}): {r['cpu_s']}; with plan / without: prepare "
              f"{r['plan_vs_no_plan']}x, whole analyze {r['analyze_plan_vs_no_plan']}x")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
