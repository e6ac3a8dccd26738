"""Committed captures that recorded their MoE routing (routing.npz): the distinct experts the
section reports per step and layer equal a hand count from the raw ids, the MoE floor reads those experts, and
no MoE point sits above the measured HBM roof. Empty until such captures are committed (the H200 runs of
scripts/gpu/routing_captures.py, under traces/h200/routing/)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from phaseprof.report.json_io import load_breakdown
from phaseprof.sol.attach import attach_sol

TRACES = Path(__file__).resolve().parents[2] / "traces"
RUNS = sorted(p.parent for p in TRACES.rglob("routing.npz") if (p.parent / "breakdown.json").exists())


@pytest.mark.parametrize("run", RUNS, ids=lambda p: str(p.relative_to(TRACES)))
def test_measured_routing_run(run: Path) -> None:
    rec = json.loads((run / "run.json").read_text())["routing"]
    sol = attach_sol(load_breakdown(run / "breakdown.json"), source=run).sol
    assert sol.ok and sol.routing == "measured (routing.npz)"
    with np.load(run / rec["file"]) as z:
        for si, step in enumerate(rec["steps"]):
            counts = z["counts"][si]
            if f"ids_{step}" in z.files:  # hand count from the raw ids
                ids = z[f"ids_{step}"].astype(np.int64)
                assert [len(set(layer.ravel().tolist())) for layer in ids] == [int((c > 0).sum()) for c in counts]
                assert all(np.bincount(layer.ravel(), minlength=rec["num_experts"]).tolist() == c.tolist()
                           for layer, c in zip(ids, counts))
            assert counts.sum() == rec["tokens"][si] * rec["top_k"] * rec["moe_layers"]
    measured = [s for s in sol.steps if s.routing == "measured"]
    assert measured and all(s.moe_experts is not None and len(s.moe_experts) == rec["moe_layers"] for s in measured)
    for ph in sol.phases:
        moe = next((b for b in ph.buckets if b.bucket == "moe"), None)
        if moe is not None and moe.time_us:
            assert moe.assumed == [] and moe.pct_of_light <= 102, (ph.phase, moe.pct_of_light)
            assert moe.achieved_tbps <= 1.02 * sol.ceiling.hbm_tbps, (ph.phase, moe.achieved_tbps)
