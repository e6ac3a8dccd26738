"""Built-in model presets: a Hugging Face ``config.json`` plus notes, run with dummy weights.

A preset is data (``phaseprof/presets/<name>.json``)::

    {"name", "architecture", "notes", "device": "cuda"|"cpu"|"any",
     "hf_config": {...the config.json content...}, "engine_defaults": {...vllm.LLM keyword arguments...}}

``materialize`` writes ``hf_config`` as ``config.json`` into a directory vLLM can load with ``load_format="dummy"``;
no tokenizer is needed because phaseprof prompts are token ids.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from phaseprof.errors import PhaseprofError

Device = Literal["cuda", "cpu", "any"]
_DEVICES: tuple[str, ...] = ("cuda", "cpu", "any")


class UnknownPreset(PhaseprofError):
    """A preset name that is not built in; the message lists the known ones."""


@dataclass(frozen=True)
class Preset:
    """One built-in model. Each ``load_preset`` call returns fresh dicts, so callers may not share mutations."""

    name: str
    architecture: str
    notes: str
    device: Device
    hf_config: dict[str, Any]
    engine_defaults: dict[str, Any]

    def config_dict(self) -> dict[str, Any]:
        """A plain, mutable copy of ``hf_config`` (what ``config.json`` holds)."""
        return copy.deepcopy(self.hf_config)

    def engine_kwargs(self) -> dict[str, Any]:
        """A plain copy of ``engine_defaults`` (``vllm.LLM`` keyword arguments this preset needs)."""
        return copy.deepcopy(self.engine_defaults)

    @property
    def is_hybrid(self) -> bool:
        """True when some layers are linear attention (Gated DeltaNet): vLLM then unifies attention and mamba pages."""
        return "linear_attention" in (self.hf_config.get("layer_types") or ())


def _preset_dir() -> Path:
    return Path(str(resources.files(__name__)))


def list_presets() -> list[str]:
    """Names of the built-in presets, sorted."""
    return sorted(p.stem for p in _preset_dir().glob("*.json"))


def load_preset(name: str) -> Preset:
    """The preset called ``name``; raises ``UnknownPreset`` (listing the known names) if there is none."""
    path = _preset_dir() / f"{name}.json"
    if "/" in name or not path.is_file():
        raise UnknownPreset(f"unknown preset {name!r}; known presets: {', '.join(list_presets())}")
    data = json.loads(path.read_text())
    missing = {"name", "architecture", "notes", "hf_config", "device"} - data.keys()
    if missing:
        raise PhaseprofError(f"preset is missing {sorted(missing)}", path=path)
    if data["device"] not in _DEVICES:
        raise PhaseprofError(f"device must be one of {_DEVICES}, not {data['device']!r}", path=path)
    if data["name"] != name:
        raise PhaseprofError(f"preset file is named {name!r} but says name={data['name']!r}", path=path)
    return Preset(
        name=data["name"],
        architecture=data["architecture"],
        notes=data["notes"],
        device=data["device"],
        hf_config=dict(data["hf_config"]),
        engine_defaults=dict(data.get("engine_defaults", {})),
    )


def materialize(preset: Preset, directory: str | Path) -> Path:
    """Write ``preset.hf_config`` as ``<directory>/config.json`` (only if its content changed); return the directory.

    The directory's content is deterministic, so vLLM's and torch.compile's caches keyed on it stay warm across runs.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    text = json.dumps(preset.config_dict(), indent=2, sort_keys=True) + "\n"
    target = directory / "config.json"
    if not target.is_file() or target.read_text() != text:
        tmp = directory / ".config.json.tmp"
        tmp.write_text(text)
        tmp.replace(target)
    return directory


def config_digest(preset: Preset) -> str:
    """Short hash of the preset's config, used to name its materialized directory."""
    blob = json.dumps(preset.config_dict(), sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def preset_of_dir(path: str) -> str | None:
    """The preset whose materialized directory ``path`` is (``.../<preset>-<config_digest>``), else None."""
    m = re.fullmatch(r"(.+)-[0-9a-f]{12}", Path(str(path).rstrip("/")).name)
    return m.group(1) if m and m.group(1) in list_presets() else None


__all__ = ["Preset", "UnknownPreset", "config_digest", "list_presets", "load_preset", "materialize", "preset_of_dir"]
