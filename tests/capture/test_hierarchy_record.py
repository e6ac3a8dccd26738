"""``--hierarchy`` in run.json and the trace's embedded key: written by new captures, absent (None) in old ones."""

from __future__ import annotations

from pathlib import Path

from phaseprof.capture.shared.options import DEFAULT_HIERARCHY, Hierarchy
from phaseprof.records import ProfileInfo, RunRecord
from phaseprof.trace.read import load_tables

ROOT = Path(__file__).resolve().parents[2]
OLD_RUN = ROOT / "traces/cpu/tiny-hybrid-prefill128-decode8"  # captured before --hierarchy existed


def test_a_run_json_from_before_the_option_reads_as_unknown() -> None:
    rec = RunRecord.read(OLD_RUN / "run.json")
    assert rec.profile is not None and rec.profile.hierarchy is None and rec.hierarchy is None
    assert "hierarchy" not in rec.embedded(1.0)
    embedded = load_tables(OLD_RUN / "trace.json.gz").meta.capture
    assert embedded is not None and embedded.hierarchy is None and "hierarchy" not in embedded.embedded()
    assert RunRecord.from_dict(rec.to_dict()) == rec  # read, written, read: unchanged


def test_a_new_record_carries_it_in_profile_and_embedded() -> None:
    rec = RunRecord(profile=ProfileInfo(hierarchy=str(Hierarchy.STACK), with_stack=True))
    assert rec.hierarchy == "stack" and rec.embedded()["hierarchy"] == "stack"
    assert RunRecord.from_dict(rec.to_dict()).hierarchy == "stack"
    assert str(DEFAULT_HIERARCHY) == "hooks" and [str(h) for h in Hierarchy] == ["hooks", "stack", "off"]
