"""A served sweep (``sweep --server``, its device the server's URL) learns its GPU — stated
(``--gpu``), recorded in ``device.gpu``, or from its profiled runs' traces — and says where it came from, so the
speed-of-light frontier works on the production path.

Acceptance: ``phaseprof pareto traces/h200/serving/bf16/decode traces/h200/serving/fp8/decode`` with no other
option prints %SOL on every point, with the ceiling named. Before: "no ceilings for device
'http://127.0.0.1:8001'" and "-" on every point."""

from __future__ import annotations

import dataclasses
import re
import subprocess
from pathlib import Path

import pytest

from phaseprof.commands.main import main
from phaseprof.errors import PhaseprofError
from phaseprof.pareto.gpu import STATED, from_profiled, served_runs, sweep_gpu
from phaseprof.records import SweepRecord

REPO = Path(__file__).resolve().parents[2]
SERVING = REPO / "traces/h200/serving"
SWEEPS = [SERVING / "bf16/decode", SERVING / "fp8/decode"]


def test_pareto_with_no_option_prints_sol_on_every_point(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pareto", *map(str, SWEEPS)]) == 0
    out = capsys.readouterr().out
    rows = re.findall(r"^ [* ] +([AB]) +(\d+) .* (\S+) +(ok|over|-) +\S* *$", out, flags=re.M)
    assert len(rows) == 10 and all(sol.endswith("%") for _, _, sol, _ in rows), rows
    assert "%SOL: speed-of-light TPOT / measured TPOT" in " ".join(out.split())
    flat = " ".join(out.split())
    for cfg, q in (("A", "bf16"), ("B", "fp8")):
        assert (f"{cfg}: %SOL on NVIDIA H200 (measured), measured: phaseprof/sol/measured/h200.json "
                f"(2026-11-30T21:41:45Z); GPU from the traces of 3 profiled runs of this server (h200/serving/{q}: "
                "profiled/c1, profiled/c16, profiled/c256)") in flat
    assert "no ceilings for device" not in flat


def test_the_gpu_is_stated_then_recorded_then_learned_from_profiled_runs() -> None:
    rec = SweepRecord.read(SWEEPS[0] / "sweep.json")
    assert rec.device.kind == "server" and rec.device.name == "http://127.0.0.1:8001"
    assert sweep_gpu(rec).name == "NVIDIA H200" and "profiled runs of this server" in sweep_gpu(rec).source
    assert sweep_gpu(rec, stated="NVIDIA H100 80GB HBM3") == sweep_gpu(rec, stated="NVIDIA H100 80GB HBM3")
    assert sweep_gpu(rec, stated="NVIDIA H100 80GB HBM3").source == STATED
    bare = dataclasses.replace(rec, device=dataclasses.replace(rec.device, gpu=None, gpu_source=None))
    none = sweep_gpu(bare)
    assert none.name is None and "pass --gpu NAME or --profiled RUN" in none.source
    runs = served_runs(SWEEPS[0], bare)
    assert [r.name for r in runs] == ["c1", "c16", "c256"]
    learned = sweep_gpu(bare, profiled=runs)
    assert learned.name == "NVIDIA H200" and learned.source == "the trace of 3 profiled run(s) of this sweep"


def test_profiled_runs_of_two_gpus_are_refused() -> None:
    with pytest.raises(PhaseprofError, match="different GPUs"):
        from_profiled(_two_gpus())


def _two_gpus() -> list[Path]:
    """Two committed runs whose run.json name different devices, if the repository holds them; else skip."""
    import json

    seen: dict[str, Path] = {}
    for name in subprocess.check_output(["git", "ls-files", "traces"], cwd=REPO, text=True).split():
        if name.endswith("run.json"):
            dev = json.loads((REPO / name).read_text()).get("device") or {}
            if dev.get("kind") == "cuda" and dev.get("name"):
                seen.setdefault(dev["name"], (REPO / name).parent)
    if len(seen) < 2:
        pytest.skip(f"every committed run is on one GPU ({', '.join(seen)})")
    return list(seen.values())[:2]


def test_every_committed_served_sweep_names_its_gpu_and_where_from() -> None:
    names = subprocess.check_output(["git", "ls-files", "traces"], cwd=REPO, text=True).split()
    served = [SweepRecord.read(REPO / n) for n in names if n.endswith("sweep.json")]
    served = [r for r in served if r.device.kind == "server"]
    assert len(served) == 11
    assert all(r.device.gpu == "NVIDIA H200" and "profiled runs of this server" in (r.device.gpu_source or "")
               for r in served)


def test_sweep_show_names_the_ceiling_and_the_gpus_source(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sweep", "--show", str(SWEEPS[1])]) == 0
    flat = " ".join(capsys.readouterr().out.split())
    assert "ceilings: NVIDIA H200 (measured), measured: phaseprof/sol/measured/h200.json" in flat
    assert "GPU from the traces of 3 profiled runs of this server" in flat and "no ceilings for" not in flat


def test_the_markdown_footer_reads_as_written(capsys: pytest.CaptureFixture[str]) -> None:
    """"per GPU\\:" in the markdown footer: a colon is escaped only where it could start an autolink."""
    assert main(["pareto", *map(str, SWEEPS), "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    assert "tok/s/GPU: total tokens/s per GPU: (prompt + output tokens" in out and "\\:" not in out.replace(":\\/", "")
    committed = (SERVING / "pareto.md").read_text()
    assert "per GPU: (prompt" in committed
