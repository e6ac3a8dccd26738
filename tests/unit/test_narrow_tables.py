"""Terminal tables at 80 and 60 columns (and in a pipe, where rich assumes 80): every header and number whole.

Real committed captures: the CPU tiny-hybrid trace, an H200 eager decode run (long CUDA kernel names) against
its graph-mode twin for ``diff``, and the two-rank H200 run for the rank tables.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from phaseprof.cli import main
from phaseprof.report.fit import split_columns

ROOT = Path(__file__).resolve().parents[2]
CPU_TRACE = ROOT / "traces/cpu/tiny-hybrid-prefill128-decode8/trace.json.gz"
EAGER = ROOT / "traces/h200/eager/20261130T094747Z-h200-qwen3.5-35b-a3b-decode-128in-32out"
GRAPH = ROOT / "traces/h200/graph/20261130T094743Z-h200-qwen3.5-35b-a3b-decode-128in-32out"
TP2 = ROOT / "traces/h200x2/tp2-eager-prefill4096-decode8"

TIMELINE_LABELS = ("wall ms", "busy ms", "busy % of wall", "idle ms", "in launch ms", "host work ms",
                   "kernels/step", "launch calls/step", "allocations/step", "dev. mallocs/step")


def _run(argv: list[str], columns: int, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("COLUMNS", str(columns))
    assert main(argv) == 0
    return capsys.readouterr().out


def _assert_fits(out: str, columns: int) -> None:
    assert "…" not in out, next(line for line in out.splitlines() if "…" in line)
    too_wide = [line for line in out.splitlines() if len(line) > columns]
    assert not too_wide, too_wide[0]


def _bucket_rows(out: str) -> dict[str, list[str]]:
    """Cells of table rows whose first cell is a name, e.g. ``│ moe │ 13.28 │ 61.3 │ 200 │``."""
    rows: dict[str, list[str]] = {}
    for line in out.splitlines():
        if line.startswith("│"):
            cells = [c.strip() for c in line.strip("│").split("│")]
            rows.setdefault(cells[0], cells[1:])
    return rows


@pytest.mark.parametrize("columns", [80, 60])
def test_analyze_cpu_trace_fits(columns: int, capsys, monkeypatch) -> None:
    out = _run(["analyze", str(CPU_TRACE)], columns, capsys, monkeypatch)
    _assert_fits(out, columns)
    rows = _bucket_rows(out)
    for label in TIMELINE_LABELS:
        assert label in rows, label
    # phases are columns: one whole value per phase in every metric row
    assert rows["steps"] == ["1", "8"]
    assert "CPU op time" in rows and "bucket" in out and "share %" in out


@pytest.mark.parametrize("columns", [80, 60])
def test_analyze_gpu_trace_fits_with_numbers_whole(columns: int, capsys, monkeypatch) -> None:
    out = _run(["analyze", str(EAGER / "trace.json.gz")], columns, capsys, monkeypatch)
    _assert_fits(out, columns)
    bd = json.loads((EAGER / "breakdown.json").read_text())
    decode = next(p for p in bd["phases"] if p["phase"] == "decode")
    rows = _bucket_rows(out)
    assert rows["wall ms"][1] == f"{decode['wall_us'] / 1000:,.2f}"
    # the first table row named after a bucket is in the prefill kernel view: ms, share and count all whole
    prefill = next(p for p in bd["phases"] if p["phase"] == "prefill")
    for b in prefill["kernel_view"]:
        assert rows[b["bucket"]] == [f"{b['time_us'] / 1000:,.2f}", f"{b['share_pct']:.1f}", f"{b['count']:,}"]
    # kernel names are never cut: the longest top kernel name is there in full once line breaks are removed
    flat = "".join(line.split("│")[1] for line in out.splitlines() if line.startswith("│")).replace(" ", "")
    longest = max((k["name"] for ks in decode["top_kernels"].values() for k in ks), key=len)
    assert longest.replace(" ", "") in flat


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
    res = subprocess.run([sys.executable, "-m", "phaseprof.cli", "analyze", str(CPU_TRACE)], capture_output=True,
                         text=True, env=env, check=True, cwd=ROOT)
    _assert_fits(res.stdout, 80)
    assert "busy % of wall" in res.stdout


def test_split_columns_packs_in_order_and_repeats_keys() -> None:
    # key 10 wide (13 with borders + 1 edge = 14); the rest 7 each (10 with borders)
    assert split_columns([10, 7, 7, 7, 7], keys=1, width=40) == [[1, 2], [3, 4]]
    assert split_columns([10, 7, 7, 7, 7], keys=1, width=200) == [[1, 2, 3, 4]]
    # a column wider than the width beside the keys still gets a part of its own
    assert split_columns([10, 100, 7], keys=1, width=40) == [[1], [2]]
    assert split_columns([10], keys=1, width=40) == [[]]
