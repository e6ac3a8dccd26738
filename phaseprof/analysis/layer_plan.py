"""The model's layer plan, read from its config: how many decoder layers, and each one's mixer and feed-forward.

The structural attribution of graph replays (:mod:`phaseprof.analysis.structural`) uses it in place of an eager
reference run. Where the config comes from, first found (as for the speed of light, ``sol/attach.py``):
``--model-config`` (a ``config.json``, its directory or a preset name); the capture facts the caller passes
(a capture analyses its trace before writing run.json); ``run.json``'s ``model_config`` beside the trace; the
capture's embedded ``model_config``; the preset the capture names.

Fields read (Hugging Face's names, ``text_config`` overlaid as vLLM does): ``num_hidden_layers``;
``layer_types`` / ``full_attention_interval`` (hybrid Gated DeltaNet models, via ``memory.model_shape``);
``num_experts`` / ``num_local_experts``, ``mlp_only_layers``, ``decoder_sparse_step`` (which layers are MoE).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from phaseprof.errors import PhaseprofError
from phaseprof.memory.model_shape import LayerKind, load_hf_config, shape_from_hf_config, text_config
from phaseprof.records import RunRecord, run_record_beside

_MIXER = {LayerKind.ATTENTION: "attention", LayerKind.GDN: "gdn"}


@dataclass(frozen=True)
class LayerPlan:
    """One entry per decoder layer: its token mixer (``gdn`` / ``attention``) and feed-forward (``moe`` /
    ``dense``), the module-view buckets the trace should show inside it. ``source``: where the config came from."""

    mixers: tuple[str, ...]
    ffns: tuple[str, ...]
    source: str

    @property
    def num_layers(self) -> int:
        return len(self.mixers)

    def layer_type(self, i: int) -> str:
        """``gdn+moe``, ``attention+dense``, ... (the names ``modules._layer_types`` gives a module tree)."""
        return f"{self.mixers[i]}+{self.ffns[i]}"


def plan_from_config(hf_config: Mapping[str, Any], *, source: str) -> LayerPlan:
    """The plan of one config; PhaseprofError when it lacks the fields (naming them)."""
    shape = shape_from_hf_config(dict(hf_config))
    cfg = text_config(dict(hf_config))
    n = shape.num_layers
    step = int(cfg.get("decoder_sparse_step") or 1)
    only_mlp = set(shape.mlp_only_layers)
    # Qwen2/3-MoE: layer i is sparse unless listed in mlp_only_layers, and when (i + 1) % decoder_sparse_step == 0
    ffns = tuple("moe" if shape.moe is not None and shape.moe.num_experts > 0 and i not in only_mlp
                 and (i + 1) % step == 0 else "dense" for i in range(n))
    return LayerPlan(mixers=tuple(_MIXER[k] for k in shape.layer_kinds), ffns=ffns, source=source)


def find_plan(*, explicit: str | Path | None, records: Sequence[RunRecord | None], trace_path: str | None
              ) -> tuple[LayerPlan | None, str]:
    """(plan, where its config came from) or (None, why there is none). ``records``: the capture's records the
    caller has, first wins (run.json beside ``trace_path`` is read after them). A bad ``explicit`` config is an
    error (PhaseprofError); a recorded one that does not parse only means no plan."""
    if explicit is not None:
        cfg, label = load_hf_config(str(explicit))
        return plan_from_config(cfg, source=label), label
    known = [r for r in (*records, run_record_beside(trace_path)) if r is not None]
    recorded = next((r.model_config for r in known if r.model_config), None)
    model = next((r.model for r in known if r.model.name), None)
    name = model.name if model else None
    kind = (model.kind or "preset") if model else None  # a trace names its model by preset only
    try:
        if recorded:
            return plan_from_config(recorded, source="run.json model_config"), "run.json model_config"
        if name and kind == "preset":
            from phaseprof.presets import UnknownPreset, load_preset

            try:
                cfg = load_preset(name).config_dict()
            except UnknownPreset:
                return None, f"model {name!r} is not a built-in preset"
            return plan_from_config(cfg, source=f"preset {name}"), f"preset {name}"
    except (PhaseprofError, KeyError, ValueError, TypeError) as e:
        return None, f"model config not usable for the layer plan: {e}"
    return None, "no model config (run.json, --model-config)"
