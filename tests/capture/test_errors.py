"""Each failure is one line on stderr, a non-zero exit, and no run directory left behind."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from phaseprof.commands.main import main


def run(args: list[str], capfd: pytest.CaptureFixture[str], out: Path) -> tuple[int, str]:
    rc = main([*args, "--out", str(out)])
    # fd-level capture also holds native libraries' own warnings (NUMA binding, ...): phaseprof's part is the
    # single "error:" line, which must be the last thing written.
    lines = [ln for ln in capfd.readouterr().err.splitlines() if ln.strip()]
    ours = [ln for ln in lines if ln.startswith("error:")]
    assert len(ours) == 1 and lines[-1] == ours[0], lines[-5:]
    assert not out.exists() or not any(out.iterdir()), "a run directory was written"
    return rc, ours[0]


def test_unknown_preset(capfd: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc, err = run(["capture", "--model", "qwen9"], capfd, tmp_path / "o")
    assert rc == 2 and "\n" not in err
    assert "unknown preset 'qwen9'; known presets:" in err and "tiny-hybrid" in err


def test_bad_engine_arg_syntax(capfd: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc, err = run(["capture", "--model", "tiny-hybrid", "--engine-arg", "max_model_len"], capfd, tmp_path / "o")
    assert rc == 2 and "\n" not in err and "bad --engine-arg 'max_model_len': expected KEY=VALUE" in err


def test_bad_sweep_list(capfd: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc, err = run(["sweep", "--tokens", "128,abc"], capfd, tmp_path / "o")
    assert rc == 2 and "\n" not in err and "bad --tokens value 'abc'" in err


def test_vllm_not_installed(capfd: pytest.CaptureFixture[str], tmp_path: Path,
                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` now raises ImportError
    rc, err = run(["capture", "--model", "tiny-hybrid"], capfd, tmp_path / "o")
    assert rc == 3 and "\n" not in err
    assert "pip install 'phaseprof[cpu]'" in err and "'phaseprof[capture]'" in err


@pytest.mark.vllm
def test_unknown_engine_arg_key(capfd: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc, err = run(["capture", "--model", "tiny-hybrid", "--engine-arg", "max_modl_len=9"], capfd, tmp_path / "o")
    assert rc == 2 and "\n" not in err and "did you mean max_model_len" in err


@pytest.mark.vllm
def test_gpu_only_model_without_cuda(capfd: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    rc, err = run(["capture", "--model", "qwen3.5-35b-a3b"], capfd, tmp_path / "o")
    assert rc == 3 and "\n" not in err and "needs a CUDA GPU" in err and "--model tiny-hybrid" in err


@pytest.mark.vllm
def test_tokens_above_model_limit(capfd: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc, err = run(["capture", "--model", "tiny-hybrid", "--tokens", "40000"], capfd, tmp_path / "o")
    assert rc == 2 and "\n" not in err and "max_position_embeddings (32768)" in err


@pytest.mark.vllm
def test_out_of_memory_names_the_knob(capfd: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc, err = run(["capture", "--model", "tiny-hybrid", "--tokens", "128", "--engine-arg",
                   "kv_cache_memory_bytes=1000"], capfd, tmp_path / "o")
    assert rc == 1 and "\n" not in err and "out of memory" in err and "kv_cache_memory_bytes" in err
