"""Whether a rank trace comes from an expert-parallel run, as the run's own records around it say.

A Kineto rank trace does not carry vLLM's engine arguments, and a tensor-parallel MoE and a TP + EP MoE with
data_parallel_size 1 run the same all-reduce after the experts. So the answer comes from the capture's records,
looked up in the trace's directory and up to ``LEVELS_UP`` directories above it, nearest first; a record that
does not say (a server capture's run.json when vLLM's ``/server_info`` was not served) does not stop the search:

- ``run.json``: ``parallel.expert_parallel`` (``phaseprof capture`` on several GPUs writes ``ranks/`` inside its
  run directory), or ``server.parallel.enable_expert_parallel`` (``phaseprof capture --server``);
- ``tp_run.json``: ``expert_parallel`` (scripts/h200x2/tp2_capture.py);
- ``serve.json``: ``engine_kwargs.enable_expert_parallel`` (the GPU sessions' server launcher, one level above
  the ``runs/`` that ``capture --server`` writes).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from phaseprof.errors import PhaseprofError
from phaseprof.records import RunRecord

LEVELS_UP = 3  # trace dir, ranks/ -> run dir -> runs/ -> the server's item dir holding serve.json


def _json(path: Path) -> dict[str, Any] | None:
    try:
        d = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None  # an unreadable side file is no evidence either way
    return d if isinstance(d, dict) else None


def _get(d: Any, *keys: str) -> bool | None:
    for k in keys:
        d = d.get(k) if isinstance(d, dict) else None
    return d if isinstance(d, bool) else None


def _run_json(path: Path) -> bool | None:
    try:
        rec = RunRecord.read(path)
    except PhaseprofError:
        return None
    if rec.parallel is not None:
        return rec.parallel.expert_parallel
    return _get(rec.server.parallel, "enable_expert_parallel") if rec.server is not None else None


def _said(d: Path) -> bool | None:
    if (d / "run.json").is_file() and (v := _run_json(d / "run.json")) is not None:
        return v
    if (d / "tp_run.json").is_file() and (v := _get(_json(d / "tp_run.json"), "expert_parallel")) is not None:
        return v
    if (d / "serve.json").is_file():
        doc = _json(d / "serve.json")
        if doc is not None and isinstance(doc.get("engine_kwargs"), dict):
            return bool(doc["engine_kwargs"].get("enable_expert_parallel", False))  # vLLM's default: off
    return None


def declared_expert_parallel(trace: str | Path) -> bool | None:
    """True / False when the nearest run record that says so says whether expert parallelism was on, else None."""
    d = Path(trace).resolve().parent
    for _ in range(LEVELS_UP + 1):
        if (v := _said(d)) is not None:
            return v
        if d.parent == d:
            break
        d = d.parent
    return None
