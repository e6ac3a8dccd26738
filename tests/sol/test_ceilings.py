"""GPU ceilings: the datasheet table loads, matches real device names, rejects bad files with one clear line;
measured files are validated; ``phaseprof ceilings`` shows both and refuses to measure without CUDA."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from phaseprof.commands.main import main
from phaseprof.errors import PhaseprofError
from phaseprof.sol.ceilings import (ceiling_for, load_measured, load_spec, measured_ceiling, spec_by_name, spec_ceiling,
                                    spec_for, validate_measured)

# Device names and SM counts as real traces record them (deviceProperties of the committed and public traces).
REAL_DEVICES = [
    ("NVIDIA H200", 132, "H200"),  # traces/h200
    ("NVIDIA H100 80GB HBM3", 132, "H100-SXM"),  # traceMap h100, TraceLens llama70b
    ("NVIDIA B200", 148, "B200"),  # TraceLens b200
    ("AMD Instinct MI300X", 304, "MI300X"),  # traceMap mi300x
]

MEASURED = {"schema_version": 1, "kind": "measured", "gpu_name": "NVIDIA H200", "sm_count": 132,
            "torch": "2.11.0+cu130", "cuda": "13.0", "measured_at": "2026-11-30T23:00:00Z",
            "bf16_dense_tflops": 700.0, "fp8_dense_tflops": None, "hbm_copy_tbps": 4.1, "hbm_read_tbps": 4.4,
            "method": {"gemm": "8192^3 bf16 matmul"}}


@pytest.mark.parametrize(("name", "sms", "want"), REAL_DEVICES)
def test_real_device_names_match(name, sms, want):
    c = spec_for(name, {"numSms": sms})
    assert c is not None and c.gpu == want and c.kind == "spec"


def test_ambiguous_or_unknown_gpus_get_no_ceiling():
    assert spec_for("AMD GPU (gfx94)", {"numSms": 304}) is None  # MI300X or MI325X: same CUs
    assert spec_for("Tesla V100-SXM2-32GB") is None
    assert spec_for(None) is None
    # an SM count that contradicts the entry: not silently taken as that GPU
    assert spec_for("NVIDIA H100 PCIe", {"numSms": 132}) is None


def test_every_entry_is_dense_and_sourced():
    entries = load_spec()
    names = {e.name for e in entries}
    for need in ("A100-80GB", "H100-SXM", "H100-PCIe", "H200", "B200", "GB200", "B300", "L40S", "MI300X", "MI325X",
                 "MI355X"):
        assert need in names
    for e in entries:
        c = spec_ceiling(e)
        assert "datasheet" in c.source
        # dense FP8 is twice dense BF16 on all of these (L40S: 733 vs 2 x 362.05 on its own datasheet); a
        # sparsity figure slipped in would make it 4x or 1x
        if c.fp8_tflops:
            assert c.fp8_tflops == pytest.approx(2 * c.bf16_tflops, rel=0.02)
    h200 = spec_by_name("h200")
    assert (h200.bf16_tflops, h200.fp8_tflops, h200.hbm_tbps) == (989.4, 1978.9, 4.8)
    assert h200.ridge("bf16") == pytest.approx(989.4 / 4.8)
    assert spec_by_name("B200").tflops("fp4") == 9000.0
    assert spec_by_name("H100-SXM").tflops("fp4") == 989.4  # no FP4 units: BF16 peak


@pytest.mark.parametrize(("text", "problem"), [
    ('[[gpu]]\nname = "X"\nmatch = ["X"]\nbf16_tflops = 1\nhbm_tbps = 1\n', "missing key 'source'"),
    ('[[gpu]]\nname = "X"\nmatch = ["X"]\nbf16_tflops = -1\nhbm_tbps = 1\nsource = "s"\n', "bf16_tflops must be"),
    ('[[gpu]]\nname = "X"\nmatch = ["("]\nbf16_tflops = 1\nhbm_tbps = 1\nsource = "s"\n', "bad regex"),
    ('[[gpu]]\nname = "X"\nmatch = ["X"]\nbf16_tflops = 1\nhbm_tbps = 1\nsource = "s"\nsparse = 2\n', "unknown key"),
    ('[[gpu]]\nname = "X"\nmatch = ["Y"]\nexamples = ["X"]\nbf16_tflops = 1\nhbm_tbps = 1\nsource = "s"\n',
     "matches none"),
    ("[[gpu]\n", "not valid TOML"),
])
def test_bad_spec_files(tmp_path: Path, text: str, problem: str):
    f = tmp_path / "c.toml"
    f.write_text(text)
    with pytest.raises(PhaseprofError, match=problem) as e:
        load_spec(f)
    assert str(f) in str(e.value)


def test_measured_file_round_trip(tmp_path: Path):
    f = tmp_path / "m.json"
    f.write_bytes(orjson.dumps(MEASURED))
    doc = load_measured(f)
    c = measured_ceiling(doc)
    assert (c.kind, c.bf16_tflops, c.hbm_tbps, c.fp8_tflops) == ("measured", 700.0, 4.4, None)
    used, warn = ceiling_for("NVIDIA H200", measured=f)
    assert used is not None and used.kind == "measured" and warn is None
    _, warn = ceiling_for("NVIDIA B200", measured=f)
    assert warn is not None and "H200" in warn and "B200" in warn


@pytest.mark.parametrize(("change", "problem"), [
    ({"kind": "spec"}, "kind must be 'measured'"),
    ({"schema_version": 2}, "schema_version must be 1"),
    ({"bf16_dense_tflops": 0}, "bf16_dense_tflops must be a positive number"),
    ({"hbm_copy_tbps": "fast"}, "hbm_copy_tbps must be"),
    ({"method": None}, "method must be an object"),
])
def test_bad_measured_files(change, problem):
    with pytest.raises(PhaseprofError, match=problem):
        validate_measured({**MEASURED, **change}, path="m.json")


def test_cli_show_side_by_side(tmp_path: Path, capsys):
    f = tmp_path / "h200-measured.json"
    f.write_bytes(orjson.dumps(MEASURED))
    assert main(["ceilings", "--show", "H200", "--measured", str(f)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    spec = next(ln for ln in lines if ln.split()[:2] == ["H200", "spec"])
    meas = next(ln for ln in lines if "measured" in ln and "NVIDIA H200" in ln)
    ratio = next(ln for ln in lines if "% of spec" in ln)
    assert "989" in spec and "4.80" in spec
    assert "700" in meas and "4.40" in meas
    assert ratio.split()[3:] == ["71", "-", "-", "92"]  # 700/989.4, 4.4/4.8
    assert max(len(ln) for ln in lines) <= 80


def test_cli_measure_without_cuda_is_a_clear_error(capsys, monkeypatch):
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["ceilings"]) == 3
    err = capsys.readouterr().err
    assert "no CUDA device" in err and len(err.strip().splitlines()) == 1


def test_bad_model_config_and_ceilings_on_analyze(tmp_path: Path, capsys):
    trace = next((Path(__file__).resolve().parents[2] / "traces" / "h200" / "graph").glob("*-prefill-4096"))
    broken = Path(__file__).resolve().parents[1] / "memory" / "data" / "broken-qwen3next" / "config.json"
    for args, problem in ((["--model-config", str(broken)], f"{broken}: not usable for the speed of light"),
                          (["--model-config", "nope"], "unknown preset 'nope'"),
                          (["--ceilings", str(tmp_path / "none.json")], "none.json: no such file")):
        out = tmp_path / "b.json"
        assert main(["analyze", str(trace), "--json", str(out), *args]) == 2
        err = capsys.readouterr().err
        assert problem in err and len(err.strip().splitlines()) == 1
        assert not out.exists()  # nothing half-written


def test_cli_measure_writes_the_validated_result(tmp_path: Path, capsys, monkeypatch):
    """The command's wiring around ``phaseprof.sol.measure.measure_ceilings`` (which needs a GPU): the result is
    validated, written atomically with --out and shown beside the datasheet entry of its GPU."""
    import sys
    import types

    import torch

    fake = types.ModuleType("phaseprof.sol.measure")
    fake.measure_ceilings = lambda *, device="cuda", quick=False: {**MEASURED, "method": {"quick": quick}}
    monkeypatch.setitem(sys.modules, "phaseprof.sol.measure", fake)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    out = tmp_path / "h200.json"
    assert main(["ceilings", "--quick", "--out", str(out)]) == 0
    assert orjson.loads(out.read_bytes()) == {**MEASURED, "method": {"quick": True}}
    shown = capsys.readouterr().out
    assert "ceilings of NVIDIA H200" in shown and "% of spec" in shown
    fake.measure_ceilings = lambda **_: {**MEASURED, "kind": "spec"}
    out.unlink()
    assert main(["ceilings", "--out", str(out)]) == 2
    assert "kind must be 'measured'" in capsys.readouterr().err and not out.exists()
