"""Rank-trace collection for ``capture --server``: only new files, only complete ones, missing ranks named.
Traces are real ones from the repository (two H200 TP2 ranks written by vLLM's own profiler), copied under the
names vLLM gives them."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from phaseprof.capture.server.capture import write_rank_traces
from phaseprof.capture.server.traces import ends_properly, snapshot, wait_for_traces
from phaseprof.errors import PhaseprofError

REPO = Path(__file__).resolve().parents[2]
TP2 = REPO / "traces" / "h200x2" / "tp2-eager-prefill4096-decode8"
NAMES = {0: "dp0_pp0_tp0_dcp0_ep0_rank0.1796032545634630045.pt.trace.json.gz",
         1: "dp0_pp0_tp1_dcp0_ep1_rank1.1796032545546451031.pt.trace.json.gz"}
FRONTEND = "vm_15857.async_llm.1796074716189440076.pt.trace.json.gz"


def _write(dest: Path, rank: int, *, now: bool = False) -> Path:
    """Rank ``rank``'s real trace under vLLM's name; ``now``: stamped with the time of writing, as torch's trace
    handler stamps it while /stop_profile runs (a capture takes only traces of its own /stop_profile)."""
    path = dest / (fresh_name(NAMES[rank]) if now else NAMES[rank])
    path.write_bytes((TP2 / f"rank{rank}.pt.trace.json.gz").read_bytes())
    return path


def fresh_name(name: str) -> str:
    """``name`` with its export stamp replaced by ``time.time_ns()`` now."""
    worker, _stamp, rest = name.split(".", 2)
    return f"{worker}.{time.time_ns()}.{rest}"


def test_only_new_complete_traces_are_taken(tmp_path: Path) -> None:
    _write(tmp_path, 0).rename(tmp_path / "old-rank-0.1.pt.trace.json.gz")  # an earlier profile: not taken
    before = snapshot(tmp_path)
    blob = (TP2 / "rank1.pt.trace.json.gz").read_bytes()
    target = tmp_path / NAMES[1]

    def slow_writer() -> None:  # a worker still flushing: half the file, a pause, the rest
        with target.open("wb") as f:
            f.write(blob[: len(blob) // 2])
            f.flush()
            time.sleep(1.0)
            f.write(blob[len(blob) // 2:])

    t = threading.Thread(target=slow_writer)
    t.start()
    try:
        got = wait_for_traces(tmp_path, before, expected=1, timeout_s=60, stable_s=0.3, poll_s=0.05)
    finally:
        t.join()
    assert [p.name for p in got.files] == [NAMES[1]] and got.ranks == (1,)
    assert target.read_bytes() == blob and ends_properly(target)


def test_incomplete_trace_is_an_error(tmp_path: Path) -> None:
    before = snapshot(tmp_path)
    blob = (TP2 / "rank0.pt.trace.json.gz").read_bytes()
    (tmp_path / NAMES[0]).write_bytes(blob[:-100])  # the gzip trailer never came
    with pytest.raises(PhaseprofError, match="1 new trace file\\(s\\) appeared but none was complete within 1 s"):
        wait_for_traces(tmp_path, before, expected=1, timeout_s=1, stable_s=0.2, poll_s=0.05)


def test_two_ranks_analysed_and_missing_ones_named(tmp_path: Path) -> None:
    traces = tmp_path / "traces"
    traces.mkdir()
    before = snapshot(traces)
    _write(traces, 0)
    _write(traces, 1)
    (traces / FRONTEND).write_bytes((TP2 / "rank1.pt.trace.json.gz").read_bytes())  # a rank-less file
    got = wait_for_traces(traces, before, expected=None, timeout_s=60, stable_s=0.2, poll_s=0.05)
    assert sorted(r for r in got.ranks if r is not None) == [0, 1] and None in got.ranks
    rank_files = [(r, p) for r, p in zip(got.ranks, got.files, strict=True) if r is not None]
    out = tmp_path / "run"
    out.mkdir()
    res = write_rank_traces(out, out, rank_files, world_size=4, trace_dir=traces, metadata={})
    assert res.error is None and sorted(res.breakdowns) == [0, 1]
    assert {p.name for p in (out / "ranks").iterdir()} == set(NAMES.values())
    for r in (0, 1):
        bd = json.loads((out / f"rank{r}.breakdown.json").read_text())
        assert bd["trace"]["distributed"]["rank"] == r and bd["trace"]["distributed"]["world_size"] == 2
        assert [p["phase"] for p in bd["phases"]][:2] == ["prefill", "decode"]
    assert len(res.warnings) == 1 and "rank(s) 2, 3 of 4 have no trace here" in res.warnings[0]
    # Without the server's layout the traces' own world size (2) is complete: no warning.
    again = tmp_path / "again"
    again.mkdir()
    assert write_rank_traces(again, again, rank_files, world_size=None, trace_dir=traces, metadata={}).warnings == ()
