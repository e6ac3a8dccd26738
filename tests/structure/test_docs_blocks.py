"""The output blocks of README.md and docs/*.md are what the current code prints
(``scripts/regenerate_docs.py`` rewrites them; ``--check`` fails on any that lag). Before: the README's "Real
output" showed the graph 4K prefill's module view as moe 37.4 % / gemm 22.1 % and "86 lines in all"; the code
printed moe 47.0 % / gemm 0.3 % / gdn 40.6 % and 89 lines (93 once the LM head was named)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("regenerate_docs", REPO / "scripts/regenerate_docs.py")
regen = importlib.util.module_from_spec(_spec)
sys.modules["regenerate_docs"] = regen  # its dataclass looks its module up there
_spec.loader.exec_module(regen)


def test_every_replayed_block_is_current(capsys) -> None:
    assert regen.main(["--check"]) == 0, capsys.readouterr().out


def test_the_readme_block_is_replayed_and_cut_where_it_was() -> None:
    lines = (REPO / "README.md").read_text().splitlines()
    (b,) = [b for b in regen.blocks(lines) if regen.replayable(b)]
    assert b.argv[1] == "analyze" and b.cut and b.output[-1] == "…"
    assert " moe                   28.16    37.4       35.42    47.0" in b.output


def test_the_readme_line_counts_are_the_outputs() -> None:
    text = " ".join((REPO / "README.md").read_text().split())
    m = re.search(r"; (\d+) lines in all, the eager 128-in/32-out decode run (\d+):", text)
    assert m is not None
    env = {**os.environ, "COLUMNS": "80", "PYTHONPATH": str(REPO)}
    for n, run in zip(m.groups(), ("graph/*-prefill-4096", "eager/*-decode-128in-32out")):
        (d,) = (REPO / "traces/h200").glob(run)
        out = subprocess.run([sys.executable, "-m", "phaseprof.commands.main", "analyze", str((d / "trace.json.gz")
                              .relative_to(REPO))], cwd=REPO, env=env, capture_output=True, text=True, check=True)
        assert len(out.stdout.splitlines()) == int(n), run


def test_the_first_line_never_breaks_a_path_mid_name() -> None:
    """A path in a table: "…prefill-4096/trace.json.\\ngz  NVIDIA H200": the path is broken after a "/" only."""
    from phaseprof.report.table import path_lines

    lines = (REPO / "README.md").read_text().splitlines()
    (b,) = [b for b in regen.blocks(lines) if regen.replayable(b)]
    assert b.output[:2] == ["traces/h200/graph/20261130T094740Z-h200-qwen3.5-35b-a3b-prefill-4096/",
                            "trace.json.gz  NVIDIA H200  (gpu trace, 10,238 events)"]
    assert path_lines("/a/bb/ccc", 5) == ["/a/", "bb/", "ccc"] and path_lines("x" * 12, 5) == ["xxxxx"] * 2 + ["xx"]
