"""One analysed trace serves every consumer: the breakdown, the timeline index and the kernel order that
``analyze`` returns equal what the separate entry points compute from scratch."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from phaseprof.analysis.pipeline import AnalysedTrace, AnalysisConfig, analyze, analyze_trace
from phaseprof.scale.ranks import analyze_ranks
from phaseprof.analysis.timeline import step_timeline
from phaseprof.classify.rules import load_rules
from phaseprof.report.diff import load_side
from phaseprof.trace.read import load_tables

REPO = Path(__file__).resolve().parents[2]
CPU = REPO / "traces/cpu/tiny-hybrid-prefill128-decode8/trace.json.gz"
GPU = REPO / "traces/public-cut/mi300x_vllm_gptoss20b_mixed_window.json.gz"
TP2 = REPO / "traces/h200x2/tp2-eager-prefill4096-decode8"


@pytest.mark.parametrize("trace", [CPU, GPU], ids=["cpu", "gpu"])
def test_one_object_matches_every_separate_entry_point(trace: Path) -> None:
    at = analyze(trace)
    tables, rules = load_tables(trace), load_rules()
    again = analyze(tables, ruleset=rules)  # tables already loaded, rules already read
    assert at.breakdown == again.breakdown == analyze_trace(trace)
    assert at.kernel_order == again.kernel_order and at.kernel_order  # real order, not empty
    assert at.timeline is at.timeline  # derived once, then kept
    for k in range(min(3, len(at.breakdown.steps))):
        a, b = step_timeline(at.timeline, step=k), step_timeline(again.timeline, step=k)
        assert (a.start_ns, a.end_ns, a.busy_ns) == (b.start_ns, b.end_ns, b.busy_ns)
        assert a.activities.equals(b.activities) and a.idle.equals(b.idle)
    # Kernel order never adds columns to the shared items table.
    assert "pos" not in at.prepared.items.columns


def test_diff_reads_a_raw_trace_through_the_pipeline() -> None:
    loaded = load_side(GPU)
    at = analyze(GPU)
    assert loaded.source == "trace" and loaded.breakdown == at.breakdown and loaded.order == at.kernel_order


def test_config_rules_are_the_rules_used(tmp_path: Path) -> None:
    extra = tmp_path / "mine.toml"
    plain = analyze(GPU)
    name = next(k.name for ph in plain.breakdown.phases for b, ks in ph.top_kernels.items() if b != "other"
                for k in ks)
    extra.write_text(f"[[kernel]]\nbucket = 'other'\npatterns = ['^{re.escape(name)}$']\nwhy = 'test'\n"
                     f"examples = [{json.dumps(name)}]\n")
    custom = analyze(GPU, config=AnalysisConfig.with_rules([extra]))
    assert custom.breakdown == analyze_trace(GPU, rules=[extra]) != plain.breakdown


def test_ranks_take_analysed_traces_or_paths() -> None:
    files = sorted(TP2.glob("rank*.pt.trace.json.gz"))
    analysed = [analyze(f) for f in files]
    assert all(isinstance(a, AnalysedTrace) for a in analysed)
    by_obj, by_path = analyze_ranks(analysed), analyze_ranks(files)
    assert by_obj.world_size == by_path.world_size == 2
    assert by_obj.ranks == by_path.ranks and by_obj.steps == by_path.steps
