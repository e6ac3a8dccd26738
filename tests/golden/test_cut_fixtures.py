"""scripts/cut_trace.py and the fixtures it made: what a cut keeps (inline events), that each committed fixture is
small, listed in its README, made only of unmodified source events, and reproduced byte for byte by its
README command (the last two need ../shared/traces/public)."""

from __future__ import annotations

import gzip
import importlib.util
import json
import re
import shlex
import sys
from pathlib import Path
from types import ModuleType

import pytest

from .facts import PUBLIC_CUT_DIR, REPO, fixture_files, raw_events

#: traces/ is shared by every engineer (~10 MB for the repo); the public cuts keep to this.
PUBLIC_CUT_BUDGET_BYTES = 2_500_000


def _cut_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("cut_trace", REPO / "scripts" / "cut_trace.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("cut_trace", mod)
    spec.loader.exec_module(mod)
    return mod


cut = _cut_module()


def X(cat: str, name: str, ts: float, dur: float, **args: object) -> dict:  # noqa: N802 - chrome 'X' event
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": dict(args)}


def test_cut_keeps_work_launched_in_the_window_and_its_flows_and_stack() -> None:
    events = [
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}},
        X("user_annotation", "execute_context_0(0)_generation_4(4)", 90, 100, **{"External id": 1}),  # encloses
        X("cuda_runtime", "cudaLaunchKernel", 95, 2, correlation=10),  # before the window
        X("cuda_runtime", "cudaGraphLaunch", 110, 5, correlation=11),
        X("cpu_op", "aten::mm", 150, 10),
        X("cuda_runtime", "cudaLaunchKernel", 205, 2, correlation=12),  # after the window
        X("kernel", "k_before", 120, 5, correlation=10),  # runs in the window, launched before: dropped
        X("kernel", "graph_k1", 116, 50, correlation=11),
        X("kernel", "graph_k2", 260, 9, correlation=11),  # runs after the window, launched in it: kept
        X("kernel", "k_after", 210, 5, correlation=12),
        X("kernel", "orphan_in", 150, 1, correlation=99),  # no launch call anywhere: kept by time
        X("gpu_user_annotation", "execute_context_0(0)_generation_4(4)", 100, 100, **{"External id": 1}),
        {"ph": "s", "cat": "ac2g", "id": 11, "pid": 1, "tid": 1, "ts": 110, "name": "ac2g"},
        {"ph": "f", "cat": "ac2g", "id": 11, "pid": 0, "tid": 7, "ts": 116, "name": "ac2g", "bp": "e"},
        {"ph": "f", "cat": "ac2g", "id": 11, "pid": 0, "tid": 7, "ts": 260, "name": "ac2g", "bp": "e"},
        {"ph": "s", "cat": "ac2g", "id": 12, "pid": 1, "tid": 1, "ts": 205, "name": "ac2g"},
        {"ph": "i", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": 150, "args": {"Bytes": 512}},
        {"ph": "i", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": 250, "args": {"Bytes": -512}},
    ]
    kept = cut.select_events(events, 100, 200)
    names = [(e["ph"], e.get("name"), e.get("ts")) for e in kept]
    assert names == [
        ("M", "process_name", None),
        ("X", "execute_context_0(0)_generation_4(4)", 90),
        ("X", "cudaGraphLaunch", 110),
        ("X", "aten::mm", 150),
        ("X", "graph_k1", 116),
        ("X", "graph_k2", 260),
        ("X", "orphan_in", 150),
        ("X", "execute_context_0(0)_generation_4(4)", 100),
        ("s", "ac2g", 110), ("f", "ac2g", 116), ("f", "ac2g", 260),
        ("i", "[memory]", 150),
    ]
    assert all(any(k is e for e in events) for k in kept)  # the very same objects: nothing rewritten
    assert [e["ph"] for e in cut.select_events(events, 100, 200, keep_metadata=False)].count("M") == 0


def test_cut_writes_the_same_bytes_twice(tmp_path: Path) -> None:
    src = tmp_path / "src.json"
    src.write_text(json.dumps({"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "X"}],
                               "traceEvents": [X("cpu_op", "aten::add", 1.5, 1), X("cpu_op", "aten::mul", 9, 1)],
                               "distributedInfo": {"rank": 0}}))
    a, b = tmp_path / "a.json.gz", tmp_path / "b.json.gz"
    cut.cut_trace(src, a, 0, 5)
    cut.cut_trace(src, b, 0, 5)
    assert a.read_bytes() == b.read_bytes()
    doc = json.loads(gzip.decompress(a.read_bytes()))
    assert list(doc) == ["schemaVersion", "deviceProperties", "traceEvents", "distributedInfo"]
    assert [e["name"] for e in doc["traceEvents"]] == ["aten::add"]
    # HTA finds a trace's rank with this regex on the raw text; compact JSON would hide it.
    assert re.search(r'"rank":\s+(\d+)', gzip.decompress(a.read_bytes()).decode())


def test_no_flows_leaves_out_only_the_flow_events(tmp_path: Path) -> None:
    events = [X("cuda_runtime", "cudaLaunchKernel", 10, 2, correlation=5), X("kernel", "k", 20, 3, correlation=5),
              {"ph": "s", "cat": "ac2g", "id": 5, "pid": 1, "tid": 1, "ts": 10, "name": "ac2g"},
              {"ph": "f", "cat": "ac2g", "id": 5, "pid": 0, "tid": 7, "ts": 20, "name": "ac2g", "bp": "e"}]
    src = tmp_path / "src.json"
    src.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    with_flows, without = tmp_path / "a.json.gz", tmp_path / "b.json.gz"
    assert cut.main([str(src), str(with_flows), "--abs-window", "0:100"]) == 0
    assert cut.main([str(src), str(without), "--abs-window", "0:100", "--no-flows"]) == 0
    a = json.loads(gzip.decompress(with_flows.read_bytes()))["traceEvents"]
    b = json.loads(gzip.decompress(without.read_bytes()))["traceEvents"]
    assert b == [e for e in a if e.get("cat") != "ac2g"] == events[:2] and len(a) == 4


def test_public_cuts_are_small_and_documented() -> None:
    files = fixture_files()
    total = sum(p.stat().st_size for p in files)
    assert total <= PUBLIC_CUT_BUDGET_BYTES, f"traces/public-cut holds {total:,} bytes"
    readme = (PUBLIC_CUT_DIR / "README.md").read_text()
    for p in files:
        assert p.name in readme, f"{p.name} is not described in traces/public-cut/README.md"


def _readme_commands() -> dict[str, list[str]]:
    """fixture name -> argv of its exact command in the README's first code block."""
    readme = (PUBLIC_CUT_DIR / "README.md").read_text()
    block = re.search(r"```sh\n(.*?)```", readme, re.S)
    assert block, "README has no ```sh block of exact commands"
    out = {}
    for line in block.group(1).splitlines():
        if line.startswith("python scripts/cut_trace.py"):
            argv = shlex.split(line)[2:]
            out[Path(argv[1]).name] = argv
    return out


def test_every_fixture_has_an_exact_command() -> None:
    commands = _readme_commands()
    assert sorted(commands) == sorted(p.name for p in fixture_files())
    assert all("--abs-window" in argv for argv in commands.values())


@pytest.mark.public
@pytest.mark.parametrize("trace", fixture_files(), ids=lambda p: p.name.split(".json")[0])
def test_fixture_is_reproduced_from_its_source(trace: Path, public_dir: Path, tmp_path: Path) -> None:
    argv = _readme_commands()[trace.name]
    src = public_dir / Path(argv[0].replace("$S/", "")).name
    out = tmp_path / trace.name
    assert cut.main([str(src), str(out), *argv[2:]]) == 0
    # The trace, not its deflate stream: committed files are re-encoded with zopfli (scripts/recompress_traces.py).
    assert gzip.decompress(out.read_bytes()) == gzip.decompress(trace.read_bytes()), \
        f"{trace.name} is not what its README command makes"
    # And every event of the cut is an event of the source, unchanged.
    source = {json.dumps(e, sort_keys=True) for e in raw_events(src)}
    missing = [e for e in raw_events(trace) if json.dumps(e, sort_keys=True) not in source]
    assert not missing, f"{len(missing)} events not in the source, e.g. {missing[0]}"
