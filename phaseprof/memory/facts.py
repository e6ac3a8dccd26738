"""vLLM's own startup facts from a capture's run directory, to set beside the prediction.

Read from ``run.json["vllm_startup_facts"]`` (what ``phaseprof capture`` writes, ``phaseprof/capture/runner.py``)
or ``run.json["vllm_facts"]``, every key optional, and, to fill gaps, from the log lines themselves: the facts'
``raw_lines`` and a ``vllm_startup.log`` beside run.json. The patterns are vLLM's format strings (same in 0.23
and 0.28; 0.28 prints KV tokens and concurrency on one line). Settings the run names (engine kwargs, the command
line, the preset) are collected so the plan can check it models the same run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from phaseprof.errors import PhaseprofError
from phaseprof.records import RunRecord
from phaseprof.vllm_log import PATTERNS, StartupFacts, facts_from_dict

LOG_PATTERNS = PATTERNS  # the one set of vLLM log patterns (phaseprof.vllm_log)


@dataclass(frozen=True)
class VllmFacts(StartupFacts):
    """What vLLM logged (``StartupFacts``: the same names capture records), plus where it came from."""

    source: str = ""
    settings: dict[str, Any] = field(default_factory=dict)
    """vLLM settings the run names (e.g. ``mamba_ssm_cache_dtype``), to check the plan models the same run."""


_FACT_SECTIONS = ("vllm_startup_facts", "vllm_facts")
_SETTING_KEYS = ("preset", "mamba_ssm_cache_dtype", "kv_cache_dtype", "max_model_len", "gpu_memory_utilization",
                 "enable_prefix_caching", "max_num_seqs", "max_cudagraph_capture_size", "tensor_parallel_size")


def _find_settings(obj: Any, out: dict[str, Any]) -> None:
    """Collect vLLM settings named anywhere in run.json: as keys, or as ``--flag value`` in strings/lists."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            key = str(k).lstrip("-").replace("-", "_")
            if key in _SETTING_KEYS and key not in out and not isinstance(v, (dict, list)):
                out[key] = v
            _find_settings(v, out)
    elif isinstance(obj, list):
        if all(isinstance(x, str) for x in obj):
            _find_settings(" ".join(obj), out)
        for x in obj:
            _find_settings(x, out)
    elif isinstance(obj, str) and "--" in obj:
        for m in re.finditer(r"--([a-z0-9-]+)(?:[ =]([^\s-][^\s]*))?", obj):
            key = m.group(1).replace("-", "_")
            if key == "mamba_ssm_dtype":
                key = "mamba_ssm_cache_dtype"
            if key in _SETTING_KEYS and key not in out:
                out[key] = m.group(2) if m.group(2) is not None else True
            if key == "no_enable_prefix_caching" and "enable_prefix_caching" not in out:
                out["enable_prefix_caching"] = False


def load_run_facts(run_dir: str | Path) -> VllmFacts:
    """Facts of one capture. A directory without run.json or a startup log → PhaseprofError."""
    run = Path(run_dir)
    run_json, log = run / "run.json", run / "vllm_startup.log"
    if not run.is_dir() or not (run_json.is_file() or log.is_file()):
        raise PhaseprofError(f"{run_dir}: not a run directory (no run.json or vllm_startup.log)")
    doc: dict[str, Any] = RunRecord.read(run_json).to_dict() if run_json.is_file() else {}
    vf: dict[str, Any] = {}
    for section in _FACT_SECTIONS:
        if isinstance(doc.get(section), dict):
            vf = {**doc[section], **vf}
    log_lines = log.read_text(errors="replace").splitlines() if log.is_file() else []
    facts = facts_from_dict(vf, log_lines)
    settings: dict[str, Any] = {}
    model = doc.get("model")
    if isinstance(model, dict) and model.get("kind") == "preset" and model.get("name"):
        settings["preset"] = model["name"]
    device, versions = doc.get("device"), doc.get("versions")
    if isinstance(device, dict) and isinstance(device.get("kind"), str):
        settings["device_kind"] = device["kind"]  # "cpu": vLLM's CPU platform has its own defaults
    if isinstance(versions, dict) and isinstance(versions.get("vllm"), str):
        settings["vllm_version"] = versions["vllm"]
    _find_settings({k: v for k, v in doc.items() if k not in (*_FACT_SECTIONS, "model_config")}, settings)
    _find_settings({k: v for k, v in vf.items() if k != "raw_lines"}, settings)
    return VllmFacts(source=str(run_json if run_json.is_file() else log), settings=settings,
                     **{f.name: getattr(facts, f.name) for f in fields(StartupFacts)})
