"""finalize_trace: distributedInfo, marker renames, trimming to the profiled steps and to a size limit."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path
from typing import Any

from phaseprof.capture.shared.trace_file import finalize_trace


def marker(i: int, ts: float, dur: float, ctx: int = 0, gen: int = 1) -> dict[str, Any]:
    return {"ph": "X", "cat": "user_annotation", "ts": ts, "dur": dur, "pid": 1, "tid": 1,
            "name": f"phaseprof_step#{i}_context_{1 if ctx else 0}({ctx})_generation_{1 if gen else 0}({gen})"}


def op(name: str, ts: float, dur: float = 5.0, cat: str = "cpu_op") -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": 1}


def mem(ts: float) -> dict[str, Any]:
    return {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "ts": ts, "s": "t", "pid": 1, "tid": 1,
            "args": {"Bytes": random.randint(1, 1 << 20), "Total Allocated": random.random()}}


def write(tmp: Path, events: list[dict[str, Any]], **top: Any) -> Path:
    raw = tmp / "raw.json"
    raw.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events, **top}))
    return raw


def read(p: Path) -> dict[str, Any]:
    return json.loads(gzip.decompress(p.read_bytes()))


def test_distributed_info_rename_and_window(tmp_path: Path) -> None:
    events = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}},
        op("add_request", 0.0),                                   # before the first step: dropped
        marker(0, 10.0, 100.0, ctx=128, gen=0), op("aten::mm", 20.0),
        marker(1, 120.0, 50.0), op("aten::add", 130.0),
        op("teardown", 400.0),                                    # after the last step: dropped
    ]
    wrong = "phaseprof_step#1_context_0(0)_generation_1(1)"
    right = "phaseprof_step#1_context_0(0)_generation_2(2)"
    info = finalize_trace(write(tmp_path, events), tmp_path / "t.json.gz", corrections={wrong: right},
                          metadata={"model": "tiny-hybrid", "vllm_version": "0.28.0"})
    doc = read(tmp_path / "t.json.gz")
    names = [e["name"] for e in doc["traceEvents"]]
    assert doc["distributedInfo"] == {"backend": "none", "rank": 0, "world_size": 1}
    assert doc["phaseprof"]["model"] == "tiny-hybrid" and doc["vllm_version"] == "0.28.0"
    assert names == ["process_name", "phaseprof_step#0_context_1(128)_generation_0(0)", "aten::mm", right,
                     "aten::add"]
    assert (info.markers, info.events, info.renamed_markers) == (2, 5, {wrong: right})
    assert info.dropped == ("2 events outside the profiled steps",)


def test_existing_distributed_info_kept(tmp_path: Path) -> None:
    gloo = {"backend": "gloo", "rank": 0, "world_size": 1}
    finalize_trace(write(tmp_path, [marker(0, 0, 10)], distributedInfo=gloo), tmp_path / "t.json.gz")
    assert read(tmp_path / "t.json.gz")["distributedInfo"] == gloo


def test_size_limit_drops_memory_then_steps(tmp_path: Path) -> None:
    random.seed(0)
    events: list[dict[str, Any]] = []
    for i in range(8):
        t0 = i * 1000.0
        events.append(marker(i, t0, 900.0))
        events += [op(f"aten::op{k}", t0 + k, 1.0) for k in range(200)]
        events += [mem(t0 + k) for k in range(300)]
    raw = write(tmp_path, events)
    full = finalize_trace(raw, tmp_path / "full.json.gz")
    no_mem = finalize_trace(raw, tmp_path / "a.json.gz", max_bytes=full.gz_bytes - 1)
    assert no_mem.markers == 8 and any("memory" in d for d in no_mem.dropped)
    assert not any(e["name"] == "[memory]" for e in read(tmp_path / "a.json.gz")["traceEvents"])
    tiny = finalize_trace(raw, tmp_path / "b.json.gz", max_bytes=no_mem.gz_bytes // 3)
    assert tiny.markers < 8 and tiny.gz_bytes <= no_mem.gz_bytes // 3
    assert tiny.dropped[-1].startswith("kept only the first")
    kept = sorted(int(e["name"].split("#")[1].split("_")[0]) for e in read(tmp_path / "b.json.gz")["traceEvents"]
                  if e["name"].startswith("phaseprof_step#"))
    assert kept == list(range(len(kept)))  # the first steps survive, in order


def test_size_limit_drops_python_frames_before_the_module_tree(tmp_path: Path) -> None:
    """Over the limit, plain Python frames go first; the ``nn.Module:`` frames (the module tree the per-layer view
    reads) stay while that is enough."""
    rng = random.Random(0)
    frames = [op(f"vllm/model_executor/layers/x.py({rng.randint(1, 10**6)}): forward_{rng.random()}", 20.0 + i * 1e-3,
                 cat="python_function") for i in range(4000)]
    modules = [op(f"nn.Module: Qwen3NextDecoderLayer_{i}", 20.0 + i, 0.5, cat="python_function") for i in range(40)]
    events = [marker(0, 10.0, 100.0, ctx=128, gen=0), op("aten::mm", 20.0), *frames, *modules]
    raw = write(tmp_path, events)
    full = finalize_trace(raw, tmp_path / "full.json.gz")
    info = finalize_trace(raw, tmp_path / "t.json.gz", max_bytes=full.gz_bytes // 4)
    kept = read(tmp_path / "t.json.gz")["traceEvents"]
    assert info.gz_bytes <= full.gz_bytes // 4
    assert [e["name"] for e in kept if e.get("cat") == "python_function"] == [m["name"] for m in modules]
    assert info.dropped[0] == "4000 python_function events (not nn.Module)"


def test_hook_module_scopes_outlast_cpu_op_trimming(tmp_path: Path) -> None:
    """``--hierarchy hooks`` writes module scopes as ``cpu_op`` events; trimming treats them as structure: they
    are not a nesting level, stay while the deepest CPU-op levels go, and go only when that is not enough."""
    rng = random.Random(1)
    events = [marker(0, 0.0, 10_000.0, ctx=128, gen=0)]
    for layer in range(4):
        t = 100.0 + layer * 2000
        events.append(op(f"nn.Module: Qwen3NextDecoderLayer_{layer}", t, 1900.0))
        for k in range(100):
            s = t + 10 + k * 18
            events += [op("aten::linear", s, 15.0), op("aten::addmm", s + 1, 12.0),
                       op(f"aten::copy_{rng.random()}", s + 2, 8.0)]
    raw = write(tmp_path, events)
    full = finalize_trace(raw, tmp_path / "full.json.gz")
    mid = finalize_trace(raw, tmp_path / "mid.json.gz", max_bytes=full.gz_bytes // 2)
    kept = read(tmp_path / "mid.json.gz")["traceEvents"]
    assert mid.dropped == ("400 CPU ops at nesting depth 3",)  # the copies; the module scope is no level
    assert sum(e["name"].startswith("nn.Module: ") for e in kept) == 4
    assert sum(e["name"] == "aten::linear" for e in kept) == 400
    tiny = finalize_trace(raw, tmp_path / "tiny.json.gz", max_bytes=mid.gz_bytes // 8)
    assert tiny.dropped[-1] == "4 nn.Module scopes (the module tree)" and tiny.markers == 1
    assert "400 CPU ops at nesting depth 2" in tiny.dropped


def test_fewer_steps_before_the_module_tree(tmp_path: Path) -> None:
    """Over the limit after every CPU-op stage, steps go (down to MIN_STEPS_WITH_TREE) before the module tree:
    an eager H200 decode capture once kept 16 steps and none of its 21,342 module scopes."""
    from phaseprof.capture.shared.trace_file import MIN_STEPS_WITH_TREE

    rng = random.Random(2)
    events: list[dict[str, Any]] = []
    for step in range(16):
        t0 = step * 10_000.0
        events.append(marker(step, t0, 9_000.0, ctx=0 if step else 512, gen=1))
        for layer in range(40):  # module scopes with random names: incompressible, they dominate the size
            events.append(op(f"nn.Module: Qwen3NextDecoderLayer_{layer}_{rng.random()}", t0 + 10 + layer * 200,
                             150.0, cat="python_function"))
    raw = write(tmp_path, events)
    full = finalize_trace(raw, tmp_path / "full.json.gz")
    info = finalize_trace(raw, tmp_path / "t.json.gz", max_bytes=full.gz_bytes // 3)
    kept = read(tmp_path / "t.json.gz")["traceEvents"]
    assert not any("nn.Module scopes" in d for d in info.dropped)
    assert MIN_STEPS_WITH_TREE <= info.markers < 16
    assert sum(e["name"].startswith("nn.Module: ") for e in kept) == 40 * info.markers
    # Only when MIN_STEPS_WITH_TREE steps with their tree still do not fit does the tree go.
    tiny = finalize_trace(raw, tmp_path / "tiny.json.gz", max_bytes=full.gz_bytes // 40)
    assert any("nn.Module scopes" in d for d in tiny.dropped)
    assert f"kept only the first {MIN_STEPS_WITH_TREE} steps" in tiny.dropped
