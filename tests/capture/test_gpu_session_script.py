"""scripts/gpu/h200_session.py rehearsed on the CPU engine (tiny-hybrid, --quick): every task runs on one
engine, the output fits the device tool's limits, and unpack_session.py rebuilds the run directories."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.vllm


def test_session_script_on_cpu(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts/gpu/h200_session.py"), "--mode", "eager", "--out", str(out),
         "--model", "tiny-hybrid", "--quick", "--budget-s", "1500"],
        # The budget is the GPU lease's safety cap (a watchdog ends the script 25 s after it), not a limit under
        # test: on AVX2-only CPUs the same quick session takes ~400 s (~140 s with AVX-512), so it must not bind.
        capture_output=True, text=True, timeout=1800, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    files = sorted(p.name for p in out.iterdir())
    assert len(files) <= 8 and all(re.fullmatch(r"[A-Za-z0-9._-]+", f) for f in files)
    assert all((out / f).stat().st_size < 5 * 1024 * 1024 for f in files)
    summary = json.loads((out / "h200-eager-summary.json").read_text())
    assert {k: v["status"] for k, v in summary["tasks"].items()} == {
        "engine_start": "ok", "capture_prefill": "ok", "capture_decode": "ok", "timing_benchmark": "ok",
        "prefill_sweep": "ok", "decode_sweep": "ok"}
    assert summary["tasks"]["engine_start"]["facts"]["attention_block_size_tokens"] > 16
    log = (out / "h200-eager.log").read_text()
    assert re.search(r"^\[\d\d:\d\d:\d\d \+\s*\d+\.\ds\] START capture_prefill", log, re.M)
    assert len([f for f in files if f.startswith("trace--")]) == 2

    dest = tmp_path / "unpacked"
    subprocess.run([sys.executable, str(ROOT / "scripts/gpu/unpack_session.py"), str(out), str(dest)],
                   check=True, capture_output=True, cwd=ROOT)
    runs = sorted(p.parent for p in (dest / "eager").rglob("trace.json.gz"))
    # Run directories start with a UTC stamp to the second: two captures in one second sort by name instead.
    assert sorted(r.name.split("-cpu-tiny-hybrid-")[1] for r in runs) == ["decode-32in-8out", "prefill-512"]
    for r in runs:
        assert {"run.json", "breakdown.json", "trace.json.gz"} <= {p.name for p in r.iterdir()}
    assert (dest / "eager" / "startup.json").is_file() and (dest / "eager" / "timing-benchmark.json").is_file()
    assert len(list((dest / "eager").glob("*sweep-prefill*/sweep.json"))) == 1
    assert len(list((dest / "eager").glob("*sweep-decode*/sweep.json"))) == 1
