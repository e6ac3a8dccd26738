"""One GPU-name normaliser (``phaseprof.gpu_names.gpu_key``) behind every place that compares GPU names: the
memory planner's catalogue, the datasheet ceilings by name, and the measured-ceilings file against a trace."""

from __future__ import annotations

import json
from pathlib import Path

from phaseprof.gpu_names import gpu_key
from phaseprof.memory.gpus import lookup_gpu
from phaseprof.sol.attach import find_measured
from phaseprof.sol.ceilings import ceiling_for, spec_by_name

REPO = Path(__file__).resolve().parents[2]
MEASURED = sorted((REPO / "traces").rglob("ceilings/*.json"))


def test_names_compare_without_case_spaces_dashes_or_underscores() -> None:
    assert gpu_key("NVIDIA H200") == gpu_key("nvidia_h200") == gpu_key("Nvidia-H 200") == "NVIDIAH200"
    assert gpu_key("H100 SXM") != gpu_key("H100 PCIe")


def test_the_memory_catalogue_and_the_datasheet_take_the_same_spellings() -> None:
    for spelling in ("H100-SXM", "h100 sxm", "H100_SXM"):
        assert lookup_gpu(spelling).name == "H100"
        assert spec_by_name(spelling).gpu == "H100-SXM"


def test_a_measured_file_is_found_and_matched_by_the_same_key(tmp_path: Path) -> None:
    assert MEASURED, "a committed measured-ceilings file (traces/**/ceilings/*.json)"
    doc = json.loads(MEASURED[0].read_text())
    run = tmp_path / "runs" / "one"
    run.mkdir(parents=True)
    (tmp_path / "runs" / "ceilings").mkdir()
    (tmp_path / "runs" / "ceilings" / "measured.json").write_text(json.dumps(doc))
    odd = doc["gpu_name"].upper().replace(" ", "_")  # the same GPU, spelt otherwise
    found = find_measured(run, odd)
    assert found == tmp_path / "runs" / "ceilings" / "measured.json"
    _, warning = ceiling_for(odd, measured=found)
    assert warning is None
    _, warning = ceiling_for("NVIDIA B200", measured=found)
    assert warning is not None and "B200" in warning
