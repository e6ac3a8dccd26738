"""One GPU catalogue (``phaseprof/gpus.toml``) and one GPU-name normaliser (``phaseprof.gpu_names.gpu_key``)
behind every place that names GPUs: the memory planner, the datasheet ceilings by name, and the measured-ceilings
file against a trace."""

from __future__ import annotations

import json
from pathlib import Path

from phaseprof.gpu_names import gpu_key
from phaseprof.memory.gpus import lookup_gpu
from phaseprof.sol.attach import find_measured
from phaseprof.sol.ceilings import ceiling_for, spec_by_name

REPO = Path(__file__).resolve().parents[1]
MEASURED = sorted((REPO / "traces").rglob("ceilings/*.json"))


def test_names_compare_without_case_spaces_dashes_or_underscores() -> None:
    assert gpu_key("NVIDIA H200") == gpu_key("nvidia_h200") == gpu_key("Nvidia-H 200") == "NVIDIAH200"
    assert gpu_key("H100 SXM") != gpu_key("H100 PCIe")


def test_the_memory_catalogue_and_the_datasheet_take_the_same_spellings() -> None:
    for spelling in ("H100-SXM", "h100 sxm", "H100_SXM", "H100", "H100-SXM5-80GB"):  # old display name: alias
        assert lookup_gpu(spelling).name == spec_by_name(spelling).gpu == "H100-SXM"
    for spelling in ("H100-PCIe", "H100-PCIE", "h100 pcie"):
        assert lookup_gpu(spelling).name == spec_by_name(spelling).gpu == "H100-PCIe"


def test_one_display_name_per_gpu() -> None:
    """Every GPU the planner and the speed of light both know is one catalogue entry: the same display name,
    and no spelling (name or alias) that leads to two entries."""
    from phaseprof.gpu_names import catalogue
    from phaseprof.memory.gpus import KNOWN_GPUS
    from phaseprof.sol.ceilings import load_spec

    gpus = catalogue().gpus
    keys = [gpu_key(s) for g in gpus for s in (g.name, *g.aliases)]
    assert len(keys) == len(set(keys))
    memory, sol = {g.name for g in KNOWN_GPUS}, {e.name for e in load_spec()}
    assert memory | sol == {g.name for g in gpus}
    assert {"H100-SXM", "H100-PCIe", "H200", "B200", "MI300X"} <= memory & sol
    for g in KNOWN_GPUS:  # a measured fact names where it was measured
        assert (g.visible_bytes is None) == (not g.visible_source)
    assert all(e.source for e in load_spec())


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
