"""Whether a rank trace comes from an expert-parallel run, as the run's own records around it say.

A Kineto rank trace does not carry vLLM's engine arguments, and a tensor-parallel MoE and a TP + EP MoE with
data_parallel_size 1 run the same all-reduce after the experts. So the answer comes from the capture's records,
looked up in the trace's directory and up to ``LEVELS_UP`` directories above it, nearest first; a record that
does not say (a server capture's run.json when vLLM's ``/server_info`` was not served) does not stop the search:

- ``run.json`` (``RunRecord.engine_settings.enable_expert_parallel``): ``parallel.expert_parallel``
  (``phaseprof capture`` on several GPUs writes ``ranks/`` inside its run directory), the server's parallel
  layout (``phaseprof capture --server``), or the engine arguments;
- ``tp_run.json`` (the TP capture of traces/h200x2/, see scripts/gpu/README.md): run.json's older multi-GPU
  layout, read by the same record;
- ``serve.json`` (``ServeLaunch``): ``engine_kwargs.enable_expert_parallel`` (the server launcher of the committed
  GPU captures, one level above the ``runs/`` that ``capture --server`` writes).
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from phaseprof.errors import PhaseprofError
from phaseprof.records import EngineSettings, RunDir, RunRecord

LEVELS_UP = 3  # trace dir, ranks/ -> run dir -> runs/ -> the server's item dir holding serve.json
#: scripts/h200x2/tp2_capture.py's record: run.json's pre-record multi-GPU layout (``RunRecord.from_dict``).
TP_RUN = "tp_run.json"
SERVE = "serve.json"


class ServeLaunch(msgspec.Struct, frozen=True):
    """``serve.json``, the GPU sessions' server launcher record: the engine arguments the server started with
    (only the settings phaseprof reads; the launcher's other keys are not read)."""

    engine_kwargs: EngineSettings | None = None


def _record_says(path: Path) -> bool | None:
    """Whether a run record (run.json, or tp_run.json in its older layout) says expert parallelism was on."""
    try:
        return RunRecord.read(path).engine_settings.enable_expert_parallel
    except PhaseprofError:
        return None  # an unreadable side file is no evidence either way


def _serve_says(path: Path) -> bool | None:
    try:
        launch = msgspec.json.decode(path.read_bytes(), type=ServeLaunch, strict=False)
    except (OSError, msgspec.DecodeError):
        return None
    if launch.engine_kwargs is None:
        return None
    return bool(launch.engine_kwargs.enable_expert_parallel)  # not given: vLLM's default, off


def _said(d: Path) -> bool | None:
    for record in (RunDir(d).record_file, d / TP_RUN):
        if record.is_file() and (v := _record_says(record)) is not None:
            return v
    return _serve_says(d / SERVE) if (d / SERVE).is_file() else None


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
