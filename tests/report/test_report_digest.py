"""The default terminal report reads in a minute: line budgets at 80 columns on committed H200 runs, one line
per kernel, verdicts and noise warnings from the numbers, short kernel names unique and stable.

Rendered with a fixed 80-column console (what a pipe gets), from the real committed traces.
"""

from __future__ import annotations

import io
import json
import re
from functools import lru_cache
from pathlib import Path

import pytest
from rich.console import Console

from phaseprof.sol.attach import reported
from phaseprof.analysis.digest import MIN_KERNEL_SHARE_PCT, top_kernels
from phaseprof.analysis.pipeline import analyze
from phaseprof.analysis.results import Breakdown
from phaseprof.analysis.verdict import NOISE_SPREAD_PCT, noise_warnings, verdicts_of
from phaseprof.report.json_io import load_breakdown
from phaseprof.report.short_names import ELLIPSIS, MAX_CHARS, short_name, short_names
from phaseprof.report.table import print_breakdown
from phaseprof.safe_text import for_terminal

ROOT = Path(__file__).resolve().parents[2]
H200 = ROOT / "traces/h200"
GRAPH_PREFILL = H200 / "graph/20261130T094740Z-h200-qwen3.5-35b-a3b-prefill-4096"
HOOKS_PREFILL = H200 / "hooks/graph-prefill-4096"
EAGER_DECODE = H200 / "eager/20261130T094747Z-h200-qwen3.5-35b-a3b-decode-128in-32out"
#: breakdown.json written by ``phaseprof capture`` before schema 1.2 (its rank traces are not committed)
OLD_BREAKDOWN = ROOT / "traces/h200x2/cli-tp2-eager-decode-2048in-4out/rank0.breakdown.json"
HOOKS_DECODE = H200 / "hooks/graph-decode-4096in-32out-steps1-4"


@lru_cache(maxsize=None)
def _reported(run: Path) -> Breakdown:
    return reported(analyze(run / "trace.json.gz"))


def _report(run: Path, width: int = 80) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=False, color_system=None)
    print_breakdown(for_terminal(_reported(run)), console)
    return buf.getvalue()


# eager decode: 150 -> 160 with the layers from the layer plan (the plan's detail line, 4 lines, and the LM
# head named in both phases, a row and a 2-line note each), +1: the trace's path is broken only after a "/",
# so an absolute one takes a line more
@pytest.mark.parametrize(("run", "budget"), [(GRAPH_PREFILL, 100), (HOOKS_PREFILL, 100), (EAGER_DECODE, 161)],
                         ids=["graph-prefill-4k", "hooks-graph-prefill-4k", "eager-decode"])
def test_default_report_fits_its_line_budget_at_80_columns(run: Path, budget: int) -> None:
    lines = _report(run).splitlines()
    assert len(lines) <= budget, f"{len(lines)} lines"
    assert max(map(len, lines)) <= 80
    # one line per kernel: every top-kernel row carries its three numbers (no name folded onto a second line)
    bd = _reported(run)
    for ph in bd.phases:
        title = next(i for i, x in enumerate(lines) if x.startswith(f"{ph.phase}: top kernels"))
        body = lines[title + 3:title + 3 + len(top_kernels(ph).kernels)]
        assert all(re.search(r"\s[\d,]+\s+[\d.,]+\s+[\d.]+\s*$", x) for x in body), body
        assert not any("<" in x or "(" in x.split("  ")[0] for x in body)  # no template or argument text


def test_report_opens_with_the_verdicts_and_keeps_ms_at_two_decimals() -> None:
    out = _report(EAGER_DECODE)
    lines = out.splitlines()
    bd = _reported(EAGER_DECODE)
    verdicts = [v.line for v in bd.verdicts.phases]
    first = next(i for i, x in enumerate(lines) if x.startswith("steps:")) + 1  # after the path and the steps
    assert lines[first:first + len(verdicts)] == verdicts
    rows = {x.split("  ")[0].strip(): x for x in lines if x.startswith(" ")}
    for label in ("wall ms", "busy ms", "idle ms"):
        assert re.fullmatch(r" [\w %,]+?(\s+[\d,]+\.\d\d)+\s*", rows[label]), rows[label]


def test_verdicts_follow_the_numbers() -> None:
    decode = next(v for v in _reported(EAGER_DECODE).verdicts.phases if v.phase == "decode")
    ph = next(p for p in _reported(EAGER_DECODE).phases if p.phase == "decode")
    assert decode.bound == "host-bound"
    assert decode.busy_pct == pytest.approx(100 * ph.gpu_busy_us / ph.wall_us)
    assert decode.host_work_pct == pytest.approx(100 * ph.idle.host_work_us / ph.wall_us)
    assert decode.line.startswith(f"decode: host-bound — GPU busy {decode.busy_pct:.0f}% of the step")
    prefill = _reported(GRAPH_PREFILL).verdicts.phases[0]
    sol_moe = next(b for b in _reported(GRAPH_PREFILL).sol.phases[0].buckets if b.bucket == "moe")
    assert (prefill.bound, prefill.top_bucket) == ("GPU-bound", "moe")
    assert prefill.top_bucket_pct_of_light == sol_moe.pct_of_light
    assert f"at {sol_moe.pct_of_light:.0f}% of its speed of light" in prefill.line


def test_views_note_names_module_classes() -> None:
    notes = next(v.views for v in _reported(HOOKS_PREFILL).verdicts.phases if v.phase == "prefill")
    assert any("LogitsProcessor" in n and "outside the decoder layers" in n for n in notes)
    decode = next(v.views for v in _reported(EAGER_DECODE).verdicts.phases if v.phase == "decode")
    assert any(n.startswith("views differ:") for n in decode)


def test_noise_warning_from_the_run_records_timing_samples() -> None:
    noisy = json.loads((HOOKS_DECODE / "run.json").read_text())  # clean TPOT p10-p90 spans 11% of its median
    quiet = json.loads((GRAPH_PREFILL / "run.json").read_text())  # 2%
    assert len(noise_warnings(noisy)) == 1 and "TPOT" in noise_warnings(noisy)[0]
    assert noise_warnings(quiet) == []
    assert _reported(HOOKS_DECODE).verdicts.noise == noise_warnings(noisy)
    # a profiled run faster than the clean one: the clean timing was disturbed
    assert "overhead x0.94" in noise_warnings({**quiet, "profile": {**quiet["profile"], "overhead_ratio": 0.94}})[0]
    assert NOISE_SPREAD_PCT == 10.0


def test_old_breakdowns_still_read_and_get_verdicts_from_their_numbers() -> None:
    # written by the capture before schema 1.2: no verdicts section (the H200 eager and graph decode runs'
    # breakdown.json were rewritten by today's analyze when their traces were cut; this TP2 rank's was not)
    old = load_breakdown(OLD_BREAKDOWN)
    assert old.schema_version in ("1.0", "1.1") and old.verdicts is None
    # eager TP2 decode, rank 0: GPU busy a small share of each step's wall, the rest host work and launches
    assert [v.bound for v in verdicts_of(old).phases] == ["host-bound", "host-bound"]


# --- short names, on real kernel names of the committed H200 runs ----------------------------------------------

def _real_names() -> list[str]:
    names = set()
    for f in sorted(H200.rglob("breakdown.json")):
        doc = json.loads(f.read_text())
        names |= {k["name"] for p in doc["phases"] for ks in p["top_kernels"].values() for k in ks}
    return sorted(names)


def test_short_names_are_unique_short_and_free_of_templates() -> None:
    names = _real_names()
    assert len(names) > 50
    short = short_names(names)
    assert len(set(short.values())) == len(names)
    for full, s in short.items():
        assert len(s.split("#")[0]) <= MAX_CHARS, s
        if full.startswith("void "):
            assert "<" not in s and "(" not in s, s


def test_short_names_are_stable() -> None:
    names = _real_names()
    once = short_names(names)
    assert short_names(reversed(names)) == once  # order does not matter
    # a name without look-alikes keeps its short name in any table
    alone = [n for n in names if list(once.values()).count(once[n]) == 1 and "#" not in once[n]]
    for n in alone[:20]:
        assert short_names([n]) == {n: once[n]}


def test_known_kernels_read_as_nsight_shows_them() -> None:
    names = _real_names()
    flash = [n for n in names if "FlashAttnFwdSm90<" in n]
    fill = next(n for n in names if "FillFunctor" in n)
    assert flash and all(short_name(n) == f"FlashAttnFwdSm90{ELLIPSIS}" for n in flash)
    assert short_name(fill) == "vectorized_elementwise_kernel‹Fill›"
    assert sorted(short_names(flash).values()) == [f"FlashAttnFwdSm90{ELLIPSIS}#{i}" for i in range(1, len(flash) + 1)]


def test_compiled_graph_rows_lose_their_hash() -> None:
    cpu = reported(analyze(ROOT / "traces/cpu/tiny-hybrid-prefill128-decode8/trace.json.gz"))
    graphs = [k.name for p in cpu.phases for ks in p.top_kernels.values() for k in ks if "CompiledFxGraph" in k.name]
    assert graphs and all(short_name(n) == "CompiledFxGraph" for n in graphs)


def test_top_kernels_keep_the_threshold_and_sum_the_rest() -> None:
    ph = _reported(GRAPH_PREFILL).phases[0]
    top = top_kernels(ph)
    assert all(k.share_pct >= MIN_KERNEL_SHARE_PCT for k in top.kernels)
    assert sum(k.time_us for k in top.kernels) + top.rest_time_us == pytest.approx(ph.gpu_busy_us)
    assert sum(k.count for k in top.kernels) + top.rest_count == sum(b.count for b in ph.kernel_view)
