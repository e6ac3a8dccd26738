"""--model resolution, device and size checks (no engine)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from phaseprof.capture.inprocess.models import check_device, check_tokens, default_model_name, resolve_model
from phaseprof.capture.shared.rundir import slugify
from phaseprof.errors import EnvironmentProblem, PhaseprofError
from phaseprof.presets import UnknownPreset


def test_preset_resolves_to_materialized_dir() -> None:
    src = resolve_model("tiny-hybrid")
    assert src.kind == "preset" and src.load_format == "dummy" and src.is_hybrid
    assert json.loads((Path(src.path) / "config.json").read_text())["model_type"] == "qwen3_next"
    assert src.engine_defaults == {"dtype": "bfloat16", "mamba_ssm_cache_dtype": "float32"}
    assert src.max_position_embeddings == 32768 and src.vocab_size == 4096


def test_local_dir_with_and_without_weights(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "vocab_size": 100,
                                                      "max_position_embeddings": 512}))
    src = resolve_model(str(tmp_path))
    assert (src.kind, src.load_format, src.device, src.vocab_size) == ("dir", "dummy", "any", 100)
    (tmp_path / "model.safetensors").write_bytes(b"")
    assert resolve_model(str(tmp_path)).load_format == "auto"


def test_dir_without_config(tmp_path: Path) -> None:
    with pytest.raises(PhaseprofError, match="no config.json"):
        resolve_model(str(tmp_path))


def test_repo_id_and_unknown() -> None:
    src = resolve_model("Qwen/Qwen3-30B-A3B")
    assert (src.kind, src.slug, src.hf_config) == ("repo", "qwen-qwen3-30b-a3b", None)
    with pytest.raises(UnknownPreset, match="known presets"):
        resolve_model("tiny-hybrd")


def test_defaults_by_device() -> None:
    assert default_model_name(True) == "qwen3.5-35b-a3b"
    assert default_model_name(False) == "tiny-hybrid"


def test_gpu_only_model_without_cuda() -> None:
    with pytest.raises(EnvironmentProblem, match="needs a CUDA GPU.*tiny-hybrid"):
        check_device(resolve_model("qwen3.5-35b-a3b"), cuda_available=False)
    check_device(resolve_model("qwen3.5-35b-a3b"), cuda_available=True)
    check_device(resolve_model("tiny-moe"), cuda_available=False)


def test_token_limits() -> None:
    src = resolve_model("tiny-hybrid")
    check_tokens(src, prompt_tokens=4096, output_tokens=32, engine_args={})
    with pytest.raises(PhaseprofError, match="exceeds tiny-hybrid's max_position_embeddings"):
        check_tokens(src, prompt_tokens=32768, output_tokens=1, engine_args={})
    with pytest.raises(PhaseprofError, match="max_model_len=100"):
        check_tokens(src, prompt_tokens=100, output_tokens=1, engine_args={"max_model_len": 100})


def test_slugify() -> None:
    assert slugify("Qwen/Qwen3.5-35B_A3B") == "qwen-qwen3.5-35b-a3b"
