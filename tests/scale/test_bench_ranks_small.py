"""The small version of benchmarks/bench_ranks.py (4 relabelled real rank files as committed, --jobs 1 vs 2 and 3):
the code path stays tested and the outputs of every contender must be identical. No timing is asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_ranks_small(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks/bench_ranks.py"), "--ranks", "4", "--mb", "0",
                           "--jobs", "2,3", "--repeat", "1", "--skip-ray", "--dir", str(tmp_path / "ranks")],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "4 rank files" in proc.stdout and "outputs identical: True" in proc.stdout
    rows = {line.split()[1]: line.split() for line in proc.stdout.splitlines() if line.startswith("jobs ")}
    assert sorted(rows) == ["1", "2", "3"]  # every worker count asked for, beside the shipped jobs 1
    assert all(0 < float(rows[n][4]) for n in ("2", "3"))  # efficiency = speed-up / workers
    # The relabelled files are one run of world size 4.
    out = subprocess.run([sys.executable, "-m", "phaseprof.commands.main", "analyze", str(tmp_path / "ranks"), "--format",
                          "json", "--jobs", "1"], capture_output=True, text=True, timeout=600)
    doc = json.loads(out.stdout)
    assert doc["world_size"] == 4 and [r["rank"] for r in doc["ranks"]] == [0, 1, 2, 3]
    assert doc["collectives"]["unmatched_instances"] == 0
