"""One speed of light per GPU. The measured ceilings of a GPU ship with phaseprof
(``phaseprof/sol/measured/``) and are chosen by the GPU's name wherever the run sits; the datasheet only for a GPU
phaseprof has no measurement of, or when asked (``--ceilings spec``); the ceiling is named in the output.

Before: ``analyze`` of ``traces/h200/graph/*`` used the measured ceilings found in ``traces/h200/ceilings/``
(784 TFLOP/s, 4.331 TB/s), the stored breakdowns of ``traces/h200/serving/*/profiled`` and ``traces/h200/pd``
the datasheet (989, 4.8)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from phaseprof.commands.main import main
from phaseprof.sol.ceilings import SPEC, choose_ceiling, packaged_measured

REPO = Path(__file__).resolve().parents[2]
COMMITTED = [REPO / n for n in subprocess.check_output(["git", "ls-files", "traces"], cwd=REPO, text=True).split()
             if n.endswith("breakdown.json")]


def test_the_h200_ceiling_is_chosen_by_name_alone() -> None:
    shipped = packaged_measured("NVIDIA H200")
    assert shipped == REPO / "phaseprof/sol/measured/h200.json"
    c, warn = choose_ceiling("NVIDIA H200")
    assert warn is None and (c.kind, c.bf16_tflops, c.fp8_tflops, c.hbm_tbps) == ("measured", 789.7, 1439.8, 4.331)
    assert c.source == "measured: phaseprof/sol/measured/h200.json (2026-11-30T21:41:45Z)"
    near = REPO / "traces/h200/ceilings/h200-measured.json"
    assert choose_ceiling("NVIDIA H200", near=near)[0] == c  # a file beside the run does not make a second one
    assert choose_ceiling("NVIDIA H200", ceilings=SPEC)[0].kind == "spec"  # asked for
    b200, _ = choose_ceiling("NVIDIA B200")  # no measurement shipped: the datasheet, and it says so
    assert packaged_measured("NVIDIA B200") is None and b200 is not None and b200.kind == "spec"


def test_every_committed_breakdown_of_one_gpu_uses_one_ceiling() -> None:
    seen: dict[str, set[tuple]] = {}
    for f in COMMITTED:
        doc = json.loads(f.read_bytes())
        c = (doc.get("sol") or {}).get("ceiling")
        if c is None:
            continue
        gpu = doc["trace"]["gpu_name"]
        seen.setdefault(gpu, set()).add((c["gpu"], c["kind"], c["hbm_tbps"], c["source"]))
    assert seen == {"NVIDIA H200": {("NVIDIA H200", "measured", 4.331,
                                     "measured: phaseprof/sol/measured/h200.json (2026-11-30T21:41:45Z)")}}


@pytest.mark.parametrize("run", ["serving/bf16/profiled/c1", "pd/qwen3.5-35b-a3b-fp8-eager-4096in-32out",
                                 "graph/20261130T094743Z-h200-qwen3.5-35b-a3b-decode-128in-32out"])
def test_analyze_names_the_same_ceiling_for_stored_and_fresh_runs(run: str,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(REPO / "traces/h200" / run)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "speed of light on NVIDIA H200 (measured):" in out and "4.331 TB/s" in out
    assert "989" not in out.split("speed of light on", 1)[1].split("ridge", 1)[0]  # not the datasheet
