"""Presets are data: the seed's model facts hold, every preset loads, and vLLM knows each architecture."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from phaseprof.presets import Preset, UnknownPreset, list_presets, load_preset, materialize

REQUIRED = {"qwen3.5-35b-a3b", "qwen3-next-80b-a3b", "qwen3-30b-a3b", "llama-3.1-8b", "tiny-hybrid", "tiny-moe"}


def _layer_counts(p: Preset) -> tuple[int, int]:
    types = p.hf_config["layer_types"]
    return types.count("linear_attention"), types.count("full_attention")


def test_required_presets_exist() -> None:
    assert REQUIRED <= set(list_presets())


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_preset_loads_and_is_consistent(name: str) -> None:
    p = load_preset(name)
    assert p.name == name
    assert p.device in ("cuda", "cpu", "any")
    assert p.hf_config["architectures"] == [p.architecture]
    assert p.notes
    if "layer_types" in p.hf_config:
        assert len(p.hf_config["layer_types"]) == p.hf_config["num_hidden_layers"]


def test_seed_model_facts() -> None:
    """The seed's Qwen3.5/3.6-35B-A3B: 40 layers 3:1 hybrid, 2 KV heads x 256, GDN 16/32 x 128, 256 experts."""
    c = load_preset("qwen3.5-35b-a3b").hf_config
    assert _layer_counts(load_preset("qwen3.5-35b-a3b")) == (30, 10)
    assert c["layer_types"][3::4] == ["full_attention"] * 10
    assert (c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]) == (2048, 16, 2, 256)
    assert (c["linear_num_key_heads"], c["linear_num_value_heads"]) == (16, 32)
    assert (c["linear_key_head_dim"], c["linear_value_head_dim"], c["linear_conv_kernel_dim"]) == (128, 128, 4)
    assert (c["num_experts"], c["moe_intermediate_size"], c["num_experts_per_tok"]) == (256, 512, 8)
    assert c["shared_expert_intermediate_size"] == 512
    assert c["vocab_size"] == 248320
    # 2 KB/token/attention layer of bf16 KV: 2 heads x 256 dims x (K+V) x 2 bytes
    assert c["num_key_value_heads"] * c["head_dim"] * 2 * 2 == 2048


def test_tiny_hybrid_has_every_component() -> None:
    p = load_preset("tiny-hybrid")
    gdn, full = _layer_counts(p)
    assert gdn >= 1 and full >= 1
    assert p.hf_config["num_experts"] > 1 and p.hf_config["shared_expert_intermediate_size"] > 0
    assert p.engine_defaults["mamba_ssm_cache_dtype"] == "float32"
    assert p.device == "any" and p.is_hybrid


def test_moe_presets_without_gdn() -> None:
    for name in ("qwen3-30b-a3b", "tiny-moe"):
        p = load_preset(name)
        assert p.architecture == "Qwen3MoeForCausalLM" and not p.is_hybrid
    assert not load_preset("llama-3.1-8b").is_hybrid


def test_unknown_preset_lists_known() -> None:
    with pytest.raises(UnknownPreset, match=r"unknown preset 'nope'; known presets: .*tiny-hybrid"):
        load_preset("nope")


def test_load_returns_fresh_dicts() -> None:
    a = load_preset("tiny-moe")
    a.hf_config["num_experts"] = 1
    assert load_preset("tiny-moe").hf_config["num_experts"] == 8


def test_materialize_writes_config(tmp_path: Path) -> None:
    p = load_preset("tiny-hybrid")
    d = materialize(p, tmp_path / "m")
    assert json.loads((d / "config.json").read_text()) == p.hf_config
    mtime = (d / "config.json").stat().st_mtime_ns
    materialize(p, d)  # unchanged content: not rewritten
    assert (d / "config.json").stat().st_mtime_ns == mtime


@pytest.mark.vllm
def test_architectures_are_registered_in_vllm() -> None:
    """Each preset's class is in the installed vLLM's registry (read as text: importing models is slow)."""
    import vllm

    registry = (Path(vllm.__file__).parent / "model_executor" / "models" / "registry.py").read_text()
    for name in list_presets():
        arch = load_preset(name).architecture
        assert re.search(rf'"{arch}":\s*\(', registry), f"{name}: {arch} not in vLLM's registry"
