"""Resolve ``--model``: a built-in preset, a local Hugging Face model directory, or a Hub repo id."""

from __future__ import annotations

import json
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from phaseprof.capture.shared.rundir import slugify
from phaseprof.errors import EnvironmentProblem, PhaseprofError
from phaseprof.presets import UnknownPreset, config_digest, list_presets, load_preset, materialize

DEFAULT_GPU_PRESET = "qwen3.5-35b-a3b"
DEFAULT_CPU_PRESET = "tiny-hybrid"

_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_WEIGHT_GLOBS = ("*.safetensors", "*.bin", "*.pt", "*.gguf")


@dataclass(frozen=True)
class ModelSource:
    """What vLLM is asked to load.

    ``path`` is what ``vllm.LLM(model=...)`` gets (a directory or a repo id); ``slug`` names run directories;
    ``hf_config`` is the config.json content when phaseprof can read it (None for a repo id not yet downloaded);
    ``load_format`` is ``dummy`` (random weights) unless real weights are present.
    """

    kind: Literal["preset", "dir", "repo"]
    name: str
    slug: str
    path: str
    device: Literal["cuda", "cpu", "any"]
    load_format: str
    hf_config: dict[str, Any] | None
    engine_defaults: dict[str, Any] = field(default_factory=dict)
    notes: str = ""

    @property
    def is_hybrid(self) -> bool:
        """True when the config has linear-attention (GDN/mamba) layers next to full attention."""
        return "linear_attention" in ((self.hf_config or {}).get("layer_types") or [])

    @property
    def max_position_embeddings(self) -> int | None:
        """The longest sequence the model's config accepts, when known."""
        cfg = self.hf_config or {}
        text_cfg = cfg.get("text_config") or {}
        value = cfg.get("max_position_embeddings") or text_cfg.get("max_position_embeddings")
        return int(value) if value else None

    @property
    def vocab_size(self) -> int:
        """Token ids of random prompts are drawn below this (32000 when the config is unknown)."""
        cfg = self.hf_config or {}
        return int(cfg.get("vocab_size") or (cfg.get("text_config") or {}).get("vocab_size") or 32000)


def default_model_name(cuda_available: bool) -> str:
    """The preset used when ``--model`` is not given: the seed's hybrid MoE on CUDA, the tiny hybrid on CPU."""
    return DEFAULT_GPU_PRESET if cuda_available else DEFAULT_CPU_PRESET


def preset_cache_dir() -> Path:
    """Where presets' config.json files are materialized (stable paths keep compile caches warm)."""
    return Path(tempfile.gettempdir()) / "phaseprof-presets"


def resolve_model(model: str) -> ModelSource:
    """Turn ``--model`` into a ModelSource. Order: existing local directory, built-in preset, repo id.

    A name that is none of them raises ``UnknownPreset`` listing the built-in presets.
    """
    local = Path(model).expanduser()
    if local.is_dir():
        cfg_path = local / "config.json"
        if not cfg_path.is_file():
            raise PhaseprofError(f"{local}: model directory has no config.json")
        try:
            cfg = json.loads(cfg_path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise PhaseprofError(f"{cfg_path}: not a readable JSON config ({e})") from e
        has_weights = any(any(local.glob(g)) for g in _WEIGHT_GLOBS)
        return ModelSource(
            kind="dir", name=str(local), slug=slugify(local.resolve().name), path=str(local.resolve()),
            device="any", load_format="auto" if has_weights else "dummy", hf_config=cfg,
        )
    try:
        preset = load_preset(model)
    except UnknownPreset:
        if _REPO_ID.match(model) and not Path(model).exists():
            return ModelSource(kind="repo", name=model, slug=slugify(model.replace("/", "--")), path=model,
                               device="any", load_format="auto", hf_config=None)
        raise
    directory = materialize(preset, preset_cache_dir() / f"{preset.name}-{config_digest(preset)}")
    return ModelSource(
        kind="preset", name=preset.name, slug=slugify(preset.name), path=str(directory), device=preset.device,
        load_format="dummy", hf_config=preset.config_dict(), engine_defaults=preset.engine_kwargs(),
        notes=preset.notes,
    )


def check_device(source: ModelSource, *, cuda_available: bool) -> None:
    """Refuse a CUDA-only model on a machine without CUDA (one line, names the CPU presets)."""
    if source.device == "cuda" and not cuda_available:
        cpu_ok = [n for n in list_presets() if load_preset(n).device in ("cpu", "any")]
        raise EnvironmentProblem(
            f"model {source.name!r} needs a CUDA GPU and none is available (torch.cuda.is_available() is False); "
            f"on CPU use --model {' or '.join(cpu_ok)}"
        )
    if source.device == "cpu" and cuda_available:
        return  # a CPU-sized model also runs on a GPU


def check_tokens(source: ModelSource, *, prompt_tokens: int, output_tokens: int,
                 engine_args: dict[str, Any]) -> None:
    """Refuse requests longer than the model's ``max_position_embeddings`` or a user-given ``max_model_len``."""
    need = prompt_tokens + output_tokens
    limit = source.max_position_embeddings
    if limit is not None and need > limit:
        raise PhaseprofError(
            f"{prompt_tokens} prompt + {output_tokens} output tokens = {need} exceeds {source.name}'s "
            f"max_position_embeddings ({limit}); use fewer --tokens"
        )
    user_len = engine_args.get("max_model_len")
    if user_len is not None and need > int(user_len):
        raise PhaseprofError(
            f"{prompt_tokens} prompt + {output_tokens} output tokens = {need} exceeds "
            f"--engine-arg max_model_len={user_len}; raise it or use fewer --tokens"
        )
