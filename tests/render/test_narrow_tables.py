"""Terminal tables at 80 and 60 columns (and in a pipe, where rich assumes 80): every header and number whole.

Real committed captures: the CPU tiny-hybrid trace, an H200 eager decode run (long CUDA kernel names) against
its graph-mode twin for ``diff``, and the two-rank H200 run for the rank tables.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from phaseprof.commands.main import main
from phaseprof.render.fit import split_columns

ROOT = Path(__file__).resolve().parents[2]
CPU_TRACE = ROOT / "traces/cpu/tiny-hybrid-prefill128-decode8/trace.json.gz"
EAGER = ROOT / "traces/h200/eager/20261130T094747Z-h200-qwen3.5-35b-a3b-decode-128in-32out"
GRAPH = ROOT / "traces/h200/graph/20261130T094743Z-h200-qwen3.5-35b-a3b-decode-128in-32out"
TP2 = ROOT / "traces/h200x2/tp2-eager-prefill4096-decode8"

TIMELINE_LABELS = ("wall ms", "busy ms", "busy % of wall", "idle ms", "in launch ms", "host work ms",
                   "queued/tail ms", "kernels", "launch calls", "allocations", "dev. mallocs", "wall ms, total")
CPU_LABELS = ("wall ms", "CPU op ms", "ops % of wall", "between ops ms", "ops", "allocations", "wall ms, total")


def _run(argv: list[str], columns: int, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("COLUMNS", str(columns))
    assert main(argv) == 0
    return capsys.readouterr().out


def _assert_fits(out: str, columns: int) -> None:
    """No cell cut by rich (its ``…``; short kernel names elide with ``‹…›``) and no line wider than the terminal."""
    cut = [line for line in out.splitlines() if "…" in line.replace("‹…›", "")]
    assert not cut, cut[0]
    too_wide = [line for line in out.splitlines() if len(line) > columns]
    assert not too_wide, too_wide[0]


def _bucket_rows(out: str) -> dict[str, list[str]]:
    """Cells of table rows by their first cell, e.g. ``│ moe │ 13.28 │ 61.3 │`` or `` moe    13.28    61.3``
    (compact tables separate cells by spaces); the first row of a name wins."""
    rows: dict[str, list[str]] = {}
    for line in out.splitlines():
        if line.startswith("│"):
            cells = [c.strip() for c in line.strip("│").split("│")]
        elif line.startswith(" ") and "  " in line.strip():
            cells = re.split(r"\s{2,}", line.strip())
        else:
            continue
        rows.setdefault(cells[0], cells[1:])
    return rows


@pytest.mark.parametrize("columns", [80, 60])
def test_analyze_cpu_trace_fits(columns: int, capsys, monkeypatch) -> None:
    out = _run(["analyze", str(CPU_TRACE)], columns, capsys, monkeypatch)
    _assert_fits(out, columns)
    rows = _bucket_rows(out)
    for label in CPU_LABELS:
        assert label in rows, label
    # phases are columns: one whole value per phase in every metric row
    assert rows["steps"] == ["1", "8"]
    assert "CPU op time" in rows and "bucket" in out
    # CPU words on a CPU trace: nothing about a GPU, launches or device mallocs
    for gpu_word in ("GPU busy", "launch calls", "dev. mallocs", "in launch ms", "kernels"):
        assert gpu_word not in rows, gpu_word


@pytest.mark.parametrize("columns", [80, 60])
def test_analyze_gpu_trace_fits_with_numbers_whole(columns: int, capsys, monkeypatch) -> None:
    out = _run(["analyze", str(EAGER / "trace.json.gz")], columns, capsys, monkeypatch)
    _assert_fits(out, columns)
    bd = json.loads((EAGER / "breakdown.json").read_text())
    decode = next(p for p in bd["phases"] if p["phase"] == "decode")
    rows = _bucket_rows(out)
    for label in TIMELINE_LABELS:
        assert label in rows, label
    # per-step means by default, the phase's total labelled as such
    assert rows["wall ms"][1] == f"{decode['per_step']['wall_us']['mean'] / 1000:,.2f}"
    assert rows["wall ms, total"][1] == f"{decode['wall_us'] / 1000:,.2f}"
    # the first row named after a bucket is in the prefill bucket table: both views, ms per step and share
    prefill = next(p for p in bd["phases"] if p["phase"] == "prefill")
    module = {b["bucket"]: b for b in prefill["module_view"]}
    for b in prefill["kernel_view"]:
        m = module[b["bucket"]]
        # each number whole, within one unit of its last digit of the stored value: the columns are rounded so
        # that they add up to the GPU busy row (render.sums.fit_sum; tests/h200/test_printed_sums.py)
        shown = [float(x.replace(",", "")) for x in rows[b["bucket"]][:4]]
        want = [b["time_us"] / 1000, b["share_pct"], m["time_us"] / 1000, m["share_pct"]]
        assert all(abs(x - w) <= unit + 1e-9 for x, w, unit in zip(shown, want, (0.01, 0.1, 0.01, 0.1))), (shown, want)


def test_full_names_prints_kernel_names_whole(capsys, monkeypatch) -> None:
    out = _run(["analyze", str(EAGER / "trace.json.gz"), "--full-names"], 80, capsys, monkeypatch)
    _assert_fits(out, 80)
    bd = json.loads((EAGER / "breakdown.json").read_text())
    decode = next(p for p in bd["phases"] if p["phase"] == "decode")
    shown = [k for ks in decode["top_kernels"].values() for k in ks if k["share_pct"] >= 0.5]
    longest = max((k["name"] for k in shown), key=len)
    # folded in its cell: whole once the cells of the name column are joined again
    lines = out.splitlines()
    # the top-kernels table's header (" bucket  kernel  n  ms  %"), not the bucket table's (" kernel ms")
    head = next(i for i, x in enumerate(lines) if x.startswith(" bucket") and re.search(r" kernel\s+n\s", x))
    start = lines[head].index(" kernel ") + 1
    cells = [re.sub(r"\s+[\d,]+\s+[\d.,]+\s+[\d.]+\s*$", "", x)[start:] for x in lines[head + 2:]]
    assert longest.replace(" ", "") in "".join(cells).replace(" ", "")


@pytest.mark.parametrize("columns", [80, 60])
def test_diff_fits(columns: int, capsys, monkeypatch) -> None:
    out = _run(["diff", str(EAGER), str(GRAPH)], columns, capsys, monkeypatch)
    _assert_fits(out, columns)
    for header in ("A ms/step", "B ms/step", "Δ pp", "A n/step", "B n/step", "Δ %"):
        assert header in out, header
    if columns == 60:
        assert "(part 2/2)" in out  # nine bucket columns do not fit 60: split, not squeezed


@pytest.mark.parametrize("columns", [80, 60])
def test_rank_tables_fit(columns: int, capsys, monkeypatch) -> None:
    out = _run(["analyze", str(TP2)], columns, capsys, monkeypatch)
    _assert_fits(out, columns)
    assert "comm overlapped %" in out and "spread ms" in out


def test_pipe_output_fits_80_columns() -> None:
    """No COLUMNS and stdout a pipe: rich falls back to 80 columns; the tables must still be whole."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["PYTHONPATH"] = str(ROOT)
    res = subprocess.run([sys.executable, "-m", "phaseprof.commands.main", "analyze", str(CPU_TRACE)], capture_output=True,
                         text=True, env=env, check=True, cwd=ROOT)
    _assert_fits(res.stdout, 80)
    assert "ops % of wall" in res.stdout


def test_split_columns_packs_in_order_and_repeats_keys() -> None:
    # key 10 wide (13 with borders + 1 edge = 14); the rest 7 each (10 with borders)
    assert split_columns([10, 7, 7, 7, 7], keys=1, width=40) == [[1, 2], [3, 4]]
    assert split_columns([10, 7, 7, 7, 7], keys=1, width=200) == [[1, 2, 3, 4]]
    # a column wider than the width beside the keys still gets a part of its own
    assert split_columns([10, 100, 7], keys=1, width=40) == [[1], [2]]
    assert split_columns([10], keys=1, width=40) == [[]]
