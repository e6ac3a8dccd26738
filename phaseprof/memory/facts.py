"""vLLM's own startup facts from a capture's run directory, to set beside the prediction.

The facts are the ones capture parsed while the engine started and stored typed in run.json
(``RunRecord.vllm_startup_facts``); a ``vllm_startup.log`` beside run.json (or alone in the directory) is parsed
with the same patterns (``phaseprof.vllm_log``) and fills what run.json does not hold. The engine settings the
plan checks it models are read by name from the record (``RunRecord.engine_settings``): a record that does not
keep a setting leaves it unknown (None).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields
from pathlib import Path

from phaseprof.errors import PhaseprofError
from phaseprof.records import EngineSettings, RunDir
from phaseprof.vllm_log import PATTERNS, StartupFacts, parse_facts

LOG_PATTERNS = PATTERNS  # the one set of vLLM log patterns (phaseprof.vllm_log)
STARTUP_LOG = "vllm_startup.log"


@dataclass(frozen=True)
class VllmFacts(StartupFacts):
    """What vLLM logged (``StartupFacts``: the same names capture records), where it came from, and the run's
    settings the plan checks against (None: the run does not say)."""

    source: str = ""
    engine: EngineSettings = field(default_factory=EngineSettings)
    preset: str | None = None  # the preset the capture ran (``model.kind`` "preset")
    device_kind: str | None = None  # "cpu": vLLM's CPU platform has its own defaults
    vllm_version: str | None = None


def _merged(stored: StartupFacts | None, log: StartupFacts) -> StartupFacts:
    """``stored`` (run.json's) where it says a fact, else the log file's."""
    if stored is None:
        return log
    said = {f.name: getattr(stored, f.name) for f in fields(StartupFacts)
            if getattr(stored, f.name) not in (None, ())}
    return dataclasses.replace(log, **said)


def load_run_facts(run_dir: str | Path) -> VllmFacts:
    """Facts of one capture. A directory without run.json or a startup log → PhaseprofError."""
    run = Path(run_dir)
    log = run / STARTUP_LOG
    rec = RunDir.open(run).record if (run / RunDir.RECORD).is_file() else None
    if not run.is_dir() or (rec is None and not log.is_file()):
        raise PhaseprofError(f"{run_dir}: not a run directory (no {RunDir.RECORD} or {STARTUP_LOG})")
    logged = parse_facts(log.read_text(errors="replace").splitlines()) if log.is_file() else StartupFacts()
    facts = _merged(rec.vllm_startup_facts if rec is not None else None, logged)
    common = {f.name: getattr(facts, f.name) for f in fields(StartupFacts)}
    if rec is None:
        return VllmFacts(source=str(log), **common)
    return VllmFacts(source=str(run / RunDir.RECORD), engine=rec.engine_settings,
                     preset=rec.model.name if rec.model.kind == "preset" else None,
                     device_kind=rec.device.kind, vllm_version=rec.versions.get("vllm"), **common)
