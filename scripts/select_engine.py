#!/usr/bin/env python3
"""Choose the vLLM engine `scripts/install.sh` installs: a CUDA build when an NVIDIA GPU with a driver that
supports it is present, else the CPU engine. Standard library only (it runs before anything is installed).

Prints shell assignments for install.sh to `eval`:
    ENGINE=cuda|cpu  ENGINE_PIP='...'  ENGINE_MSG='one line saying what and why'
``PHASEPROF_ENGINE=cpu|cuda`` overrides the detection (``auto``, the default, detects).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

TABLE = Path(__file__).with_name("engines.toml")
_CUDA_VERSION = re.compile(r"CUDA Version:\s*([0-9]+)\.([0-9]+)")
_DRIVER_VERSION = re.compile(r"Driver Version:\s*([0-9][0-9.]*)")


@dataclass(frozen=True)
class Gpu:
    """What `nvidia-smi` said: the first GPU's name, the driver version and the highest CUDA it supports."""

    name: str
    driver: str
    cuda: tuple[int, int] | None


@dataclass(frozen=True)
class Choice:
    engine: str  # "cuda" | "cpu"
    pip: str  # the pip requirement(s) for the engine, besides phaseprof's own extras
    message: str  # one line for the user


def probe_gpu(timeout_s: float = 20.0) -> tuple[Gpu | None, str]:
    """Run `nvidia-smi` from PATH. Returns (the GPU, "") or (None, why there is none usable)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None, "no nvidia-smi on PATH"
    try:
        header = subprocess.run([exe], capture_output=True, text=True, timeout=timeout_s)
        names = subprocess.run([exe, "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                               text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"nvidia-smi failed ({type(e).__name__})"
    if header.returncode != 0 or names.returncode != 0:
        err = (header.stderr or names.stderr or header.stdout).strip().splitlines()
        return None, f"nvidia-smi failed (exit {header.returncode or names.returncode}: {err[0][:80] if err else 'no output'})"
    gpus = [n.strip() for n in names.stdout.splitlines() if n.strip()]
    if not gpus:
        return None, "nvidia-smi lists no GPU"
    cuda = _CUDA_VERSION.search(header.stdout)
    driver = _DRIVER_VERSION.search(header.stdout)
    return Gpu(name=gpus[0], driver=driver.group(1) if driver else "?",
               cuda=(int(cuda.group(1)), int(cuda.group(2))) if cuda else None), ""


def _version(text: str) -> tuple[int, int]:
    major, minor = text.split(".")[:2]
    return int(major), int(minor)


def choose(gpu: Gpu | None, why_none: str, *, override: str, table: dict) -> Choice:
    """The engine for this machine (``override``: "auto", "cpu" or "cuda")."""
    cpu = Choice("cpu", table["cpu"]["package"], "")
    cpu_why = table["cpu"]["why"]
    if override == "cpu":
        return Choice("cpu", cpu.pip, f"engine: CPU (PHASEPROF_ENGINE=cpu): {cpu_why}")
    best = table["cuda"][0]
    cuda_pip = f"vllm=={best['vllm']}"
    if override == "cuda":
        where = f" on {gpu.name}" if gpu else f" ({why_none})"
        return Choice("cuda", cuda_pip, f"engine: CUDA vLLM {best['vllm']} (PHASEPROF_ENGINE=cuda){where}: {best['why']}")
    if gpu is None:
        return Choice("cpu", cpu.pip, f"engine: CPU, {why_none}: {cpu_why}")
    if gpu.cuda is None:
        return Choice("cpu", cpu.pip, f"engine: CPU: nvidia-smi shows {gpu.name} but no CUDA version (driver "
                      f"{gpu.driver}); set PHASEPROF_ENGINE=cuda to install vLLM {best['vllm']} anyway")
    for entry in table["cuda"]:
        if gpu.cuda >= _version(entry["min_driver_cuda"]):
            return Choice("cuda", f"vllm=={entry['vllm']}",
                          f"engine: CUDA vLLM {entry['vllm']} (torch {entry['torch']}) for {gpu.name}, driver "
                          f"{gpu.driver} (CUDA {gpu.cuda[0]}.{gpu.cuda[1]}): {entry['why']}")
    need = min((_version(e["min_driver_cuda"]) for e in table["cuda"]))
    return Choice("cpu", cpu.pip, f"engine: CPU: {gpu.name}'s driver {gpu.driver} supports CUDA "
                  f"{gpu.cuda[0]}.{gpu.cuda[1]}, phaseprof's CUDA engine needs CUDA >= {need[0]}.{need[1]} "
                  f"(update the driver to >= 580, or set PHASEPROF_ENGINE=cuda with your own vLLM build)")


def main() -> int:
    override = os.environ.get("PHASEPROF_ENGINE", "auto").strip().lower() or "auto"
    if override not in ("auto", "cpu", "cuda"):
        print(f"PHASEPROF_ENGINE must be auto, cpu or cuda, got {override!r}", file=sys.stderr)
        return 2
    table = tomllib.loads(TABLE.read_text())
    gpu, why = probe_gpu() if override != "cpu" else (None, "")
    c = choose(gpu, why, override=override, table=table)
    print(f"ENGINE={c.engine}\nENGINE_PIP={shlex.quote(c.pip)}\nENGINE_MSG={shlex.quote(c.message)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
