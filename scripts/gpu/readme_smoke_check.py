"""Checks of ``readme_smoke.sh``'s runs; one summary line per run, then the checks that failed; exit 1 if any.

What is checked, per run directory (prefill: the README's main command; decode: ``capture --phase decode``):
- the capture and its ``analyze`` exited 0;
- run.json's headline timing (TTFT for prefill, TPOT for decode) is a positive median, and on CUDA the
  serving-default engine's figure and the profiled engine's figure are both recorded (``engine.async_scheduling``)
  with vLLM alone beside them (``vllm_generate_ms``: ``llm.generate`` on the serving engine); for decode the
  serving TPOT is within 5 % of vLLM alone;
- graph mode: every decoder layer of the model's config is found and module+layer attribution (everything but
  the kernel-name fallback) covers at least ``--min-coverage`` % of GPU time in every phase.
The run directories' run.json, breakdown.json and vllm.log are copied to OUT as ``<phase>-<file>``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any


def _rc(out: Path, name: str) -> tuple[int | None, int | None]:
    f = out / f"{name}.rc"
    if not f.is_file():
        return None, None
    rc, secs = f.read_text().split()
    return int(rc), int(secs)


def check_run(out: Path, phase: str, run_dir: str, min_coverage: float) -> tuple[str, list[str]]:
    """The run's summary line and its failed checks."""
    fails: list[str] = []
    if run_dir == "skipped":
        return f"{phase}: not run (SMOKE_PHASES)", []
    rc, secs = _rc(out, phase)
    if rc != 0:
        fails.append(f"{phase}: capture exit {rc}")
    arc, _ = _rc(out, f"analyze-{phase}")
    if arc != 0:
        fails.append(f"{phase}: analyze exit {arc}")
    d = Path(run_dir)
    if run_dir == "none" or not (d / "run.json").is_file():
        return f"{phase}: no run directory (capture exit {rc})", fails + [f"{phase}: no run.json"]
    run: dict[str, Any] = json.loads((d / "run.json").read_text())
    for name in ("run.json", "breakdown.json", "vllm.log"):
        if (d / name).is_file():
            shutil.copyfile(d / name, out / f"{phase}-{name}")
    metric = run["timing"]["headline_metric"]
    head = (run["timing"].get(metric) or {}).get("median_ms")
    if not head or head <= 0:
        fails.append(f"{phase}: no {metric} median in run.json")
    a = run["engine"].get("async_scheduling") or {}
    cuda = run["device"]["kind"] == "cuda"
    if cuda:
        for key in ("serving_timing_ms", "marker_timing_ms", "vllm_generate_ms"):
            if not a.get(key):
                fails.append(f"{phase}: engine.async_scheduling.{key} missing")
        g = a.get("vllm_generate_ratio")
        if metric == "tpot" and g is not None and abs(g - 1) > 0.05:
            fails.append(f"{phase}: serving TPOT {a['serving_timing_ms']:.3f} ms is x{g:.3f} vLLM alone "
                         f"({a['vllm_generate_ms']:.3f} ms): more than 5 % off")
    n_layers = (run.get("model_config") or {}).get("num_hidden_layers") or (
        (run.get("model_config") or {}).get("text_config") or {}).get("num_hidden_layers")
    cov_txt = ""
    bd_file = d / "breakdown.json"
    if run.get("mode") == "graph" and bd_file.is_file():
        attr = json.loads(bd_file.read_text()).get("attribution") or {}
        parts = []
        for p in attr.get("phases") or []:
            pct = p.get("coverage_pct") or {}
            cov = 100.0 - float(pct.get("kernel_name", 100.0))
            layers = len(p.get("layers") or [])
            parts.append(f"{p['phase']} {cov:.1f}% / {layers} layers")
            if cov < min_coverage:
                fails.append(f"{phase}: {p['phase']} module+layer coverage {cov:.1f}% < {min_coverage:g}%")
            if n_layers and p["phase"] != "other" and layers != n_layers:
                fails.append(f"{phase}: {p['phase']} found {layers} of {n_layers} decoder layers")
        cov_txt = "; module+layer " + ", ".join(parts) if parts else "; no attribution in breakdown.json"
    served = (f"; serving {a['serving_timing_ms']:.2f} ms, profiled engine {a['marker_timing_ms']:.2f} ms "
              f"(x{a['ratio']:.2f}), vLLM alone {a['vllm_generate_ms']:.2f} ms") if a.get("marker_timing_ms") and \
        a.get("vllm_generate_ms") else ""
    line = (f"{phase}: exit {rc} in {secs} s; {run['device']['name']}, {run['model']['name']} {run['quant']} "
            f"{run['mode']}; {metric.upper()} {head:.2f} ms{served}{cov_txt}")
    return line, fails


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--prefill", required=True)
    ap.add_argument("--decode", required=True)
    ap.add_argument("--min-coverage", type=float, default=95.0)
    args = ap.parse_args()
    fails: list[str] = []
    skipped = [p for p, d in (("prefill", args.prefill), ("decode", args.decode)) if d == "skipped"]
    for phase, run_dir in (("prefill", args.prefill), ("decode", args.decode)):
        line, f = check_run(args.out, phase, run_dir, args.min_coverage)
        print(line)
        fails += f
    for f in fails:
        print(f"FAIL {f}")
    print("readme smoke: " + ("all checks hold" if not fails else f"{len(fails)} check(s) failed")
          + (f" ({', '.join(skipped)} not run)" if skipped else ""))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
