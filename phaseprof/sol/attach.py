"""Find a breakdown's model config and ceiling, and attach the ``sol`` section.

Model config, first found: ``--model-config`` (a ``config.json``, a directory holding one, or a preset name);
``run.json``'s ``model_config`` (the config.json content a capture records); the preset the capture names
(``model.kind == "preset"`` in run.json, or the ``model`` string embedded in the trace). Ceiling: the measured
file given with ``--ceilings``, else the datasheet entry matching the trace's GPU.
"""

from __future__ import annotations

from pathlib import Path
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

from phaseprof.analysis.results import Breakdown
from phaseprof.errors import PhaseprofError
from phaseprof.gpu_names import gpu_key
from phaseprof.memory.model_shape import load_hf_config
from phaseprof.records import RunRecord, SweepRecord, run_record_beside
from phaseprof.routing import read_routing
from phaseprof.sol.analyze import NEEDS_CONFIG, sol_section, with_sol
from phaseprof.sol.ceilings import SPEC, choose_ceiling, load_measured
from phaseprof.sol.model import SolModel, sol_model
from phaseprof.analysis.sol_results import SolSection

if TYPE_CHECKING:
    from phaseprof.analysis.pipeline import AnalysedTrace


def run_record_of(trace_or_dir: str | Path | None) -> RunRecord | None:
    """``run.json`` beside the trace (``records.run_record_beside``); None without one."""
    return run_record_beside(trace_or_dir)


def _preset_config(name: str) -> dict[str, Any] | None:
    from phaseprof.presets import UnknownPreset, load_preset

    try:
        return load_preset(name).config_dict()
    except UnknownPreset:
        return None


def _read(cfg: dict[str, Any], name: str, label: str, quant: str | None = None) -> SolModel:
    try:
        return sol_model(cfg, name=name, quant=quant)
    except PhaseprofError as e:
        raise PhaseprofError(f"{label}: not usable for the speed of light: {e}") from None
    except (KeyError, ValueError, TypeError) as e:
        raise PhaseprofError(f"{label}: not usable for the speed of light: bad or missing field {e}") from None


def find_model(records: Sequence[RunRecord | SweepRecord | None], explicit: str | Path | None = None
               ) -> tuple[SolModel | None, str]:
    """(model, where its config came from), or (None, why not). ``records``: what the capture recorded, first
    wins (a model config, else the model's name). A bad ``explicit`` config is an error; a bad recorded one only
    means no SOL numbers (the breakdown itself stays). The capture's ``quant`` (vLLM's online ``quantization``,
    e.g. fp8 from bf16 weights) applies to any config without a ``quantization_config``: an FP8 capture's GEMMs
    run on FP8 tensor cores, so a BF16 floor would sit above what they measure."""
    known = [r for r in records if r is not None]
    quant = next((r.quant for r in known if isinstance(getattr(r, "quant", None), str) and r.quant), None)
    if explicit is not None:
        cfg, label = load_hf_config(str(explicit))
        name = Path(str(explicit)).stem if label != f"preset {explicit}" else str(explicit)
        return _read(cfg, name, label, quant), label
    recorded = next((r.model_config for r in known if r.model_config is not None), None)
    model = next((r.model for r in known if r.model.name), None)
    name = model.name if model else None
    try:
        if recorded:
            return _read(dict(recorded), str(name or ""), "run.json model_config", quant), "run.json model_config"
        kind = model.kind or "preset" if model else None  # a trace names its model by preset only
        if name and kind == "preset":
            cfg = _preset_config(name)
            if cfg is not None:
                return _read(cfg, name, f"preset {name}", quant), f"preset {name} (named by the capture)"
            return None, f"model {name!r} is not a built-in preset"
    except PhaseprofError as e:
        return None, str(e)
    return None, "no model config recorded"


#: Where a capture session keeps its GPU's measured ceilings: a ``ceilings/`` folder beside or above the run
#: directories (``traces/h200/ceilings/`` for ``traces/h200/graph/<run>/``), up to this many levels up.
CEILINGS_DIR, CEILINGS_LEVELS = "ceilings", 3


def find_measured(source: str | Path | None, gpu_name: str | None) -> Path | None:
    """A measured-ceilings JSON for ``gpu_name`` in the nearest ``ceilings/`` folder above ``source`` (used by
    ``choose_ceiling`` only for a GPU phaseprof ships no measured file of)."""
    if source is None or not gpu_name:
        return None
    here = Path(source).resolve()
    here = here if here.is_dir() else here.parent
    for d in [here, *here.parents][:CEILINGS_LEVELS + 1]:
        for f in sorted((d / CEILINGS_DIR).glob("*.json")) if (d / CEILINGS_DIR).is_dir() else ():
            try:
                doc = load_measured(f)
            except PhaseprofError:
                continue
            if gpu_key(doc["gpu_name"]) == gpu_key(gpu_name):
                return f
    return None


def sol_of(bd: Breakdown, *, source: str | Path | None = None, model_config: str | Path | None = None,
           ceilings: str | Path | None = None, capture: RunRecord | None = None) -> SolSection:
    """``bd``'s ``sol`` section: numbers when a model config and a ceiling are found, else a status saying
    what is missing. ``source``: the trace or run directory (its ``run.json`` is read). ``capture``: facts
    the caller knows beyond the breakdown's and run.json's (a capture analyses its trace before it writes
    run.json), they win. ``ceilings``: a measured file; "spec" for the datasheet; None = the GPU's one
    baseline (``ceilings.choose_ceiling``: shipped measured file, else one beside the run, else the
    datasheet). A bad ``model_config`` raises PhaseprofError."""
    if bd.trace.device != "gpu":
        return SolSection(status="not for CPU-only traces")
    run = run_record_of(source)
    model, where = find_model((capture, run, bd.capture), model_config)
    if model is None:
        return SolSection(status=NEEDS_CONFIG, notes=[where])
    gpu = bd.trace.gpu_name
    ceiling, warning = choose_ceiling(gpu, bd.trace.gpu_properties, ceilings=ceilings,
                                      near=find_measured(source, gpu) if ceilings is None else None)
    recorded = next((r.routing for r in (capture, run) if r is not None and r.routing), None)
    routing = read_routing(run_dir_of(source), recorded)
    return sol_section(bd, model, ceiling, model_source=where, notes=[warning] if warning else [], routing=routing)


def run_dir_of(source: str | Path | None) -> Path:
    """The run directory of a trace or run directory (where run.json and routing.npz live)."""
    p = Path(source) if source is not None else Path(".")
    return p if p.is_dir() else p.parent


#: Each analysed trace's section, computed on first request and kept as long as the trace object lives.
_ANALYSED: WeakKeyDictionary[AnalysedTrace, SolSection] = WeakKeyDictionary()


def analysed_sol(at: AnalysedTrace) -> SolSection:
    """The analysed trace's speed of light (``sol_of`` with its config: ``--model-config``, ``--ceilings``, the
    capture's record), computed once per trace object: run.json and the ceilings files are read as they were at
    the first request. Without a model config (or on a CPU trace) a status saying what is missing. A bad
    explicit ``config.model_config`` raises PhaseprofError."""
    if at not in _ANALYSED:
        c = at.config
        _ANALYSED[at] = sol_of(at.breakdown, source=at.path, model_config=c.model_config, ceilings=c.ceilings,
                               capture=c.capture)
    return _ANALYSED[at]


def reported(at: AnalysedTrace) -> Breakdown:
    """The breakdown with its ``sol`` and ``verdicts`` sections: what ``phaseprof analyze`` prints and writes,
    and what a capture's breakdown.json holds. The verdicts' noise warnings read the capture's run.json (beside
    the trace) when there is one, else the record the caller passed (``config.capture``)."""
    from dataclasses import replace

    from phaseprof.analysis.verdict import verdicts_of

    bd = with_sol(at.breakdown, analysed_sol(at))
    return replace(bd, verdicts=verdicts_of(bd, run=run_record_of(at.path) or at.config.capture))


def attach_sol(bd: Breakdown, *, source: str | Path | None = None, model_config: str | Path | None = None,
               ceilings: str | Path | None = None) -> Breakdown:
    """``bd`` with its ``sol`` section (``sol_of``) and the verdicts read off it (``analysis.verdict``). For
    breakdowns read from JSON; an analysed trace has its own (``reported``)."""
    from dataclasses import replace

    from phaseprof.analysis.verdict import verdicts_of

    bd = with_sol(bd, sol_of(bd, source=source, model_config=model_config, ceilings=ceilings))
    return replace(bd, verdicts=verdicts_of(bd, run=run_record_of(source)))


def shape_check(trace: str | Path, bd: Breakdown, model_config: str | Path | None = None):  # noqa: ANN201
    """The Input-Dims cross-check of ``trace`` (see ``sol.shapes``): (ShapeCheck or None, why not)."""
    from phaseprof.sol.shapes import check_shapes

    model, where = find_model((run_record_of(trace), bd.capture), model_config)
    if model is None:
        return None, f"needs --model-config ({where})"
    world = bd.trace.distributed.get("world_size") if isinstance(bd.trace.distributed, dict) else None
    check = check_shapes(trace, model, tp=world if isinstance(world, int) and world > 1 else 1)
    return check, "" if check is not None else "the trace recorded no GEMM shapes (record_shapes) inside marked steps"
