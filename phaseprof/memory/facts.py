"""vLLM's own startup facts from a capture's run directory, to set beside the prediction.

Read from ``run.json["vllm_startup_facts"]`` (what ``phaseprof capture`` writes, ``phaseprof/capture/runner.py``)
or ``run.json["vllm_facts"]``, every key optional, and, to fill gaps, from the log lines themselves: the facts'
``raw_lines`` and a ``vllm_startup.log`` beside run.json. The patterns are vLLM's format strings (same in 0.23
and 0.28; 0.28 prints KV tokens and concurrency on one line). Settings the run names (engine kwargs, the command
line, the preset) are collected so the plan can check it models the same run.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from phaseprof.errors import PhaseprofError

_NUM = r"([0-9][0-9,]*(?:\.[0-9]+)?)"
LOG_PATTERNS: dict[str, re.Pattern[str]] = {
    "attention_block_size": re.compile(r"Setting attention block size to (\d+) tokens"),
    "mamba_page_padding_pct": re.compile(r"Padding mamba page size by " + _NUM + "%"),
    "kv_cache_tokens": re.compile(r"GPU KV cache size: " + _NUM + " tokens"),
    "max_concurrency_tokens": re.compile(r"Maximum concurrency for " + _NUM + " tokens per request"),
    "max_concurrency": re.compile(r"tokens per request: " + _NUM + "x"),
    "available_kv_cache_gib": re.compile(r"Available KV cache memory: " + _NUM + " GiB"),
    "model_loading_gib": re.compile(r"Model loading took " + _NUM + " GiB"),
    "cudagraph_estimate_gib": re.compile(r"Estimated CUDA graph memory: " + _NUM + " GiB"),
    "cudagraph_actual_gib": re.compile(r"CUDA graph pool memory: " + _NUM + r" GiB \(actual\)"),
    "oom_tried_gib": re.compile(r"Tried to allocate " + _NUM + " GiB"),
}


@dataclass(frozen=True)
class VllmFacts:
    """What vLLM logged. Units in names; every field ``None`` when the run does not say."""

    source: str
    attention_block_size: int | None = None
    mamba_page_padding_pct: float | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    max_concurrency_tokens: int | None = None
    available_kv_cache_gib: float | None = None
    model_loading_gib: float | None = None
    cudagraph_estimate_gib: float | None = None
    cudagraph_actual_gib: float | None = None
    oom_tried_gib: float | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    """vLLM settings the run names (e.g. ``mamba_ssm_cache_dtype``), to check the plan models the same run."""
    raw_lines: tuple[str, ...] = ()
    """The log lines the facts came from."""

    @property
    def is_empty(self) -> bool:
        return all(getattr(self, name) is None for name in LOG_PATTERNS)


_INT_FIELDS = {"attention_block_size", "kv_cache_tokens", "max_concurrency_tokens"}
_FACT_ALIASES = {"attention_block_size_tokens": "attention_block_size", "kv_cache_gib": "available_kv_cache_gib"}
"""run.json key spellings of ``phaseprof capture`` → ours."""
_FACT_SECTIONS = ("vllm_startup_facts", "vllm_facts")
_SETTING_KEYS = ("preset", "mamba_ssm_cache_dtype", "kv_cache_dtype", "max_model_len", "gpu_memory_utilization",
                 "enable_prefix_caching", "max_num_seqs", "max_cudagraph_capture_size", "tensor_parallel_size")


def _coerce(name: str, value: Any) -> int | float | None:
    if value is None:
        return None
    try:
        num = float(str(value).replace(",", ""))
    except ValueError:
        return None
    return int(num) if name in _INT_FIELDS else num


def parse_log_lines(lines: list[str]) -> dict[str, int | float]:
    """First match of every known pattern (vLLM logs each once; the first is the engine's)."""
    found: dict[str, int | float] = {}
    for line in lines:
        for name, pat in LOG_PATTERNS.items():
            if name not in found and (m := pat.search(line)):
                v = _coerce(name, m.group(1))
                if v is not None:
                    found[name] = v
    return found


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
    doc: dict[str, Any] = {}
    if run_json.is_file():
        try:
            doc = json.loads(run_json.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise PhaseprofError(f"{run_json}: unreadable JSON ({e})") from e
        if not isinstance(doc, dict):
            raise PhaseprofError(f"{run_json}: not a JSON object")
    vf: dict[str, Any] = {}
    for section in _FACT_SECTIONS:
        if isinstance(doc.get(section), dict):
            vf = {**{_FACT_ALIASES.get(k, k): v for k, v in doc[section].items()}, **vf}
    lines = [str(x) for x in vf.get("raw_lines") or []]
    if log.is_file():
        lines += log.read_text(errors="replace").splitlines()
    values: dict[str, Any] = parse_log_lines(lines)
    for f in fields(VllmFacts):
        if f.name in LOG_PATTERNS and vf.get(f.name) is not None:
            coerced = _coerce(f.name, vf[f.name])
            if coerced is not None:
                values[f.name] = coerced  # the capture's own parse wins over ours
    settings: dict[str, Any] = {}
    model = doc.get("model")
    if isinstance(model, dict) and model.get("kind") == "preset" and model.get("name"):
        settings["preset"] = model["name"]
    _find_settings({k: v for k, v in doc.items() if k not in _FACT_SECTIONS}, settings)
    _find_settings({k: v for k, v in vf.items() if k != "raw_lines"}, settings)
    matched = tuple(ln.strip() for ln in lines if any(p.search(ln) for p in LOG_PATTERNS.values()))
    return VllmFacts(source=str(run_json if run_json.is_file() else log), settings=settings,
                     raw_lines=matched, **values)
