#!/usr/bin/env python
"""Re-run the output blocks of README.md and docs/*.md on the committed data, so that what they show is what the
current code prints (one truth in every view).

A block is a fenced code block whose first line is ``$ phaseprof <command> ...`` (continued on the next lines
with a trailing backslash) for a command that reads committed files only (``REPLAYED``) and whose inputs exist in
the repository; the lines after the command are replaced by what the command prints into a pipe at 80 columns
(``COLUMNS=80``, stdout and stderr, as a user sees them in a terminal), and a ``$ ... ; echo $?`` block gets the
exit status last. A block that ends with a line ``…`` (or ``...``) was cut by hand: it keeps as many lines as
before the cut. Blocks of other commands (capture, diff of placeholder files), of several commands, or elided in
the middle are left alone; docs/study-h200-qwen35-a3b.md is written by scripts/make_study.py.

    python scripts/regenerate_docs.py            # rewrite the blocks that differ
    python scripts/regenerate_docs.py --check    # exit 1 when any block differs from the current code
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Commands whose output depends only on committed files (and the code).
REPLAYED = ("analyze", "diff", "pareto", "memory", "sweep --show", "ceilings --show")
#: Written by their own script.
SKIPPED = {"docs/study-h200-qwen35-a3b.md"}
CUT = "…"
CUTS = (CUT, "...")  # a block cut by hand ends with one of these
_FENCE = re.compile(r"^```[a-z]*$")


@dataclass(frozen=True)
class Block:
    """One output block: ``start`` / ``end``: the line indices of its fences; ``command``: the lines of the
    command (with the ``$``); ``output``: the lines after it; ``cut``: it ends with ``…``."""

    start: int
    end: int
    command: list[str]
    output: list[str]
    cut: bool

    @property
    def argv(self) -> list[str]:
        text = " ".join(line.rstrip("\\").strip() for line in self.command)[2:]
        return shlex.split(text.split(";", 1)[0])

    @property
    def echo_status(self) -> bool:
        return "; echo $?" in self.command[-1]


def blocks(lines: list[str]) -> list[Block]:
    out, i = [], 0
    while i < len(lines):
        if _FENCE.match(lines[i]) and i + 1 < len(lines) and lines[i + 1].startswith("$ phaseprof "):
            j = i + 1
            command = [lines[j]]
            while command[-1].endswith("\\") and j + 1 < len(lines):
                j += 1
                command.append(lines[j])
            end = next(k for k in range(j + 1, len(lines)) if lines[k].startswith("```"))
            body = lines[j + 1:end]
            out.append(Block(i, end, command, body, bool(body) and body[-1].strip() in CUTS))
            i = end + 1
        else:
            i += 1
    return out


def replayable(b: Block) -> bool:
    """A block of one ``REPLAYED`` command on files in the repository, not elided in its middle."""
    if any(line.startswith("$ ") for line in b.output) or any(line.strip() in CUTS for line in b.output[:-1]):
        return False  # several commands in one block, or lines left out by hand: not a replay
    argv = b.argv
    if len(argv) < 2 or argv[0] != "phaseprof":
        return False
    cmd = " ".join(argv[1:3])
    if not any(cmd.startswith(r) for r in REPLAYED):
        return False
    paths = [a for a in argv[2:] if not a.startswith("-") and ("/" in a or CUT in a or a.endswith(("json", "gz")))]
    return all((ROOT / p).exists() for p in paths)


def run(b: Block) -> list[str]:
    """What the block's command prints into a pipe at 80 columns (stdout, then stderr), lines right-stripped."""
    env = {**os.environ, "COLUMNS": "80", "PYTHONPATH": str(ROOT), "NO_COLOR": "1", "TERM": "dumb"}
    p = subprocess.run([sys.executable, "-m", "phaseprof.commands.main", *b.argv[1:]], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=600)
    lines = [line.rstrip() for line in (p.stdout + p.stderr).splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    if b.echo_status:
        lines.append(str(p.returncode))
    return lines


def regenerate(path: Path, *, check: bool) -> list[str]:
    """The blocks of ``path`` that differ (their first command line); rewritten unless ``check``."""
    lines = path.read_text().splitlines()
    stale = []
    for b in reversed(blocks(lines)):  # from the end: earlier indices stay valid
        if not replayable(b):
            continue
        new = run(b)
        if b.cut:
            new = [*new[:len(b.output) - 1], b.output[-1]]
        if new != b.output:
            stale.append(b.command[0])
            lines[b.start + 1 + len(b.command):b.end] = new
    if stale and not check:
        path.write_text("\n".join(lines) + "\n")
    return stale


def main(argv: list[str]) -> int:
    check = "--check" in argv
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    stale = 0
    for f in files:
        if f.relative_to(ROOT).as_posix() in SKIPPED:
            continue
        for cmd in regenerate(f, check=check):
            stale += 1
            print(f"{'stale' if check else 'rewrote'}  {f.relative_to(ROOT)}: {cmd[:100]}")
    print(f"{stale} block(s) {'behind the code' if check else 'rewritten'}")
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
