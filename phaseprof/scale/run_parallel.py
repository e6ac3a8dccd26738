"""Whether a rank trace comes from an expert-parallel run, as the run's own record beside it says.

A Kineto rank trace does not carry vLLM's engine arguments, and a tensor-parallel MoE and a TP + EP MoE with
data_parallel_size 1 run the same all-reduce after the experts. So the answer comes from the capture's record,
looked up in the trace's directory and its parent (``phaseprof capture`` writes ``ranks/`` inside its run):
``run.json`` (``parallel.expert_parallel``), ``tp_run.json`` (``expert_parallel``, scripts/h200x2/tp2_capture.py)
or ``serve.json`` (``engine_kwargs.enable_expert_parallel``, the server captures). None when no record says.
"""

from __future__ import annotations

from pathlib import Path

import orjson

from phaseprof.errors import PhaseprofError
from phaseprof.records import RunRecord


def _from_json(path: Path) -> bool | None:
    try:
        d = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None  # an unreadable side file is no evidence either way
    if not isinstance(d, dict):
        return None
    if path.name == "tp_run.json":
        v = d.get("expert_parallel")
    else:
        kw = d.get("engine_kwargs")
        v = kw.get("enable_expert_parallel", False) if isinstance(kw, dict) else None
    return v if isinstance(v, bool) else None


def declared_expert_parallel(trace: str | Path) -> bool | None:
    """True / False when a run record beside the trace says whether expert parallelism was on, else None."""
    here = Path(trace).parent
    for d in (here, here.parent):
        run = d / "run.json"
        if run.is_file():
            try:
                par = RunRecord.read(run).parallel
            except PhaseprofError:
                par = None
            if par is not None:
                return par.expert_parallel
        for name in ("tp_run.json", "serve.json"):
            if (d / name).is_file() and (v := _from_json(d / name)) is not None:
                return v
    return None
