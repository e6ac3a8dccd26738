"""Size bound by design: a trace over its limit loses CPU-op detail, never markers, steps, phases or total time.

Real data: the committed tiny-hybrid CPU capture (13,229 CPU ops, six nesting levels), finalized again with
smaller limits, and inline traces for the loop rule (the AVX2 per-group convolution shape).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from phaseprof.analysis.pipeline import analyze_trace
from phaseprof.capture.shared.trace_file import finalize_trace
from phaseprof.capture.shared.trim import cpu_op_tree, drop_loops

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "traces/cpu/tiny-hybrid-prefill128-decode8/trace.json.gz"


def op(name: str, ts: float, dur: float, tid: int = 1) -> dict[str, Any]:
    return {"ph": "X", "cat": "cpu_op", "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": tid}


@pytest.fixture(scope="module")
def raw(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("raw") / "trace.raw.json"
    p.write_bytes(gzip.decompress(FIXTURE.read_bytes()))
    return p


def test_tree_depth_and_parents_per_thread() -> None:
    events = [op("outer", 0, 100), op("mid", 10, 50), op("leaf", 20, 10), op("other_thread", 15, 5, tid=2),
              {"ph": "X", "cat": "kernel", "name": "k", "ts": 12, "dur": 3}, op("next", 100, 10)]
    idx, parent, depth = cpu_op_tree(events)
    assert idx == [0, 1, 2, 3, 5]
    assert depth.tolist() == [1, 2, 3, 1, 1] and parent.tolist() == [-1, 0, 1, -1, -1]


def test_loop_children_go_with_their_subtrees() -> None:
    conv = [op("aten::_convolution", 0, 10_000)]
    groups = [op("aten::_slow_conv2d_forward", 1 + 10 * g, 8) for g in range(100)]
    inner = [op("aten::addmm", 2 + 10 * g, 2) for g in range(100)]
    few = [op("aten::add", 20_000 + 10 * k, 5) for k in range(3)]
    kept, note = drop_loops(conv + groups + inner + few + [op("parent", 19_999, 100)], limit=64)
    assert [e["name"] for e in kept] == ["aten::_convolution"] + ["aten::add"] * 3 + ["parent"]
    assert note is not None and note.startswith("200 CPU ops inside loops") and "by 1 parent op(s)" in note
    assert drop_loops(conv + groups[:64], limit=64) == (conv + groups[:64], None)


@pytest.mark.parametrize("max_bytes", [150_000, 60_000])
def test_trimmed_capture_keeps_markers_phases_and_total(raw: Path, tmp_path: Path, max_bytes: int) -> None:
    full = finalize_trace(raw, tmp_path / "full.json.gz")
    small = finalize_trace(raw, tmp_path / "small.json.gz", max_bytes=max_bytes)
    assert small.gz_bytes <= max_bytes < full.gz_bytes and small.max_bytes == max_bytes
    assert "memory events" in small.dropped[0] and any("nesting depth" in d for d in small.dropped)
    a, b = analyze_trace(full.path), analyze_trace(small.path)
    assert [p.phase for p in b.phases] == ["prefill", "decode"]
    # the prefill step survives whole: the same CPU op time (self times add up to the top-level ops)
    pa, pb = a.phases[0], b.phases[0]
    assert pb.steps == 1 and pb.gpu_busy_us == pytest.approx(pa.gpu_busy_us, rel=1e-6)
    assert {"moe", "gdn", "gemm"} <= {x.bucket for x in pb.kernel_view if x.time_us > 0}
    doc = json.loads(gzip.decompress(small.path.read_bytes()))
    top_level = sum(1 for d in cpu_op_tree(doc["traceEvents"])[2] if d == 1)
    assert top_level > 0 and max(cpu_op_tree(doc["traceEvents"])[2]) <= 2
    if small.markers < full.markers:  # only when levels were not enough: the first steps kept, in order
        assert small.dropped[-1] == f"kept only the first {small.markers} steps"
