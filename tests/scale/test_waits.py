"""Three numbers for one wait ("late by", "waited", "c.wait") are defined, printed as a
waterfall that sums, and a rank that mostly waits is said to be "waiting on rank N", not "GPU-bound".

The real TP2 + expert-parallel decode step on two H200s (traces/h200x2/server-tp2-ep/decode-step1): rank 0 late
by 180.71 ms, rank 1 waited 138.22 ms, c.wait 74.80 ms; rank 1's phase verdict read "GPU-bound, busy 81% —
communication 96%" while it waited."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from phaseprof.commands.main import main
from phaseprof.scale.ranks import analyze_ranks, find_trace_files
from phaseprof.scale.waits import rank_verdicts, rank_waits, waterfall_lines

TP2_EP = Path(__file__).resolve().parents[2] / "traces/h200x2/server-tp2-ep/decode-step1"


@pytest.fixture(scope="module")
def summary():
    return analyze_ranks(find_trace_files(TP2_EP))


def _busy(s) -> dict[int, float]:
    return {r: bd.totals["gpu_busy_us"] for r, bd in s.ranks.items()}


def test_the_parts_add_up(summary) -> None:
    c = summary.collectives
    (w0, w1) = rank_waits(c, _busy(summary))
    # two ranks: rank 1's early time is rank 0's lateness; waited is part of it, c.wait part of waited
    assert w1.early_ms == pytest.approx(c.lateness_us_by_rank[0] / 1e3)
    assert w1.waited_ms + w1.ended_ms == pytest.approx(w1.early_ms)
    assert w1.combine_wait_ms + w1.dispatch_wait_ms + w1.other_wait_ms == pytest.approx(w1.waited_ms)
    assert (w0.waiting_on, w1.waiting_on) == (None, 0)


def test_every_printed_waterfall_line_sums(summary) -> None:
    lines = waterfall_lines(summary.collectives, _busy(summary))
    assert lines[0].startswith("rank 0 was last to arrive 82x; late by 180.71 = compute 5.96 + launch 21.92 + host")
    assert lines[1] == "rank 1 arrived early by 180.71 = waited in its kernel 138.22 + kernel already over 42.49"
    assert lines[2] == "  waited 138.22 = EP combine (c.wait) 74.80 + other collectives 63.42"
    for line in lines:
        nums = [float(x.replace(",", "")) for x in re.findall(r"\d[\d,]*\.\d\d", line)]
        assert round(sum(nums[1:]), 2) == nums[0], line


def test_the_waiting_rank_is_said_to_wait_on_the_late_one(summary, capsys: pytest.CaptureFixture[str]) -> None:
    v = rank_verdicts(summary.collectives, _busy(summary))
    assert list(v) == [1] and v[1].startswith("waiting on rank 0 — 96% of its GPU busy (138.22 of 143.88 ms)")
    assert v[1].endswith("rank 0 was late by host work")
    assert main(["analyze", str(TP2_EP)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "rank 1: waiting on rank 0 — 96% of its GPU busy" in out and "how the waits add up (ms):" in out
    assert "late by = summed over the collectives a rank reached last" in out
    assert main(["analyze", str(TP2_EP), "-f", "markdown"]) == 0
    md = capsys.readouterr().out
    assert "- rank 1: waiting on rank 0" in md and "## How the waits add up (ms)" in md
