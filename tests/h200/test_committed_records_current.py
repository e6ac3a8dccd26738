"""The records committed under traces/ are what the current code writes.

- a breakdown whose trace is kept beside it equals a fresh ``phaseprof analyze`` of that trace, at the current
  schema (before: ``traces/h200/graph/*prefill-4096/breakdown.json`` was schema 1.0 with moe 37.4 % / gemm
  22.1 % in its module view, the code gave moe 47.0 % / gemm 0.3 % / gdn 40.6 %);
- a breakdown kept without its trace has its derived sections (``sol``, ``verdicts``) as the code re-derives
  them from the stored data (its kernel and module views cannot be redone; its schema_version stays as recorded);
- a served sweep names its GPU.

Refresh with ``python scripts/regenerate_records.py`` (``--check`` lists what is behind)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from phaseprof.defaults import SCHEMA_VERSION

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("regenerate_records", REPO / "scripts/regenerate_records.py")
regen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(regen)

BREAKDOWNS = regen.committed_breakdowns()
WITH_TRACE = [p for p in BREAKDOWNS if regen.trace_of(p) is not None]
WITHOUT = [p for p in BREAKDOWNS if regen.trace_of(p) is None]


def _id(p: Path) -> str:
    return str(p.parent.relative_to(REPO / "traces"))


def test_the_committed_tree() -> None:
    assert len(WITH_TRACE) == 7 and len(WITHOUT) == 23


@pytest.mark.parametrize("path", WITH_TRACE, ids=_id)
def test_a_breakdown_with_its_trace_is_a_fresh_analysis(path: Path) -> None:
    stored = json.loads(path.read_bytes())
    assert stored["schema_version"] == SCHEMA_VERSION
    fresh = regen.fresh(path, regen.trace_of(path))
    assert [k for k in fresh if fresh[k] != stored.get(k)] == [], "run scripts/regenerate_records.py"


@pytest.mark.parametrize("path", WITHOUT, ids=_id)
def test_a_breakdown_without_its_trace_has_its_derived_sections_current(path: Path) -> None:
    stored = json.loads(path.read_bytes())
    assert regen.regenerated(path) == stored, "run scripts/regenerate_records.py"


def test_every_served_sweep_records_its_gpu() -> None:
    for path in regen.committed_sweeps():
        assert regen.sweep_with_gpu(path) == json.loads(path.read_bytes()), path


@pytest.mark.parametrize("run", ["serving/bf16/profiled/c1", "pd/qwen3.5-35b-a3b-fp8-eager-4096in-32out"])
def test_a_stored_breakdown_is_printed_without_the_recording_hosts_path(run: str, capsys) -> None:
    """A committed breakdown's trace.path is where it was recorded (/root/keep/…); analyze names the
    trace beside the breakdown, marked not kept."""
    from phaseprof.commands.main import main

    for fmt in ("table", "markdown"):
        assert main(["analyze", str(REPO / "traces/h200" / run), "-f", fmt]) == 0
        out = capsys.readouterr().out
        assert "/root/" not in out and "trace.json.gz (not kept)" in " ".join(out.split())


def test_a_pd_run_names_the_gpu_its_engines_traces_name() -> None:
    """A PD run.json recorded no device (the Runs page's GPU cell was empty); it is the one its engines'
    breakdowns name, where they were kept (the UCX_TLS repeat kept none: no GPU claimed)."""
    runs = regen.committed_pd_runs()
    assert len(runs) == 3
    for path in runs:
        doc = json.loads(path.read_bytes())
        assert regen.pd_with_device(path) == doc
        kept = (path.parent / "prefill/breakdown.json").is_file()
        assert (doc["device"]["name"] == "NVIDIA H200") if kept else doc["device"]["name"] is None
