"""Render docs/study-h200-qwen35-a3b.md from its template: every ``<!-- run: COMMAND -->`` line is replaced by the
command (shown) and its real output, so each table in the study comes from a phaseprof command it names.

    python scripts/make_study.py            # run from the repository root, after the captures are committed
"""

from __future__ import annotations

import glob
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "docs/study-h200-qwen35-a3b.template.md"
OUT = ROOT / "docs/study-h200-qwen35-a3b.md"
RUN = re.compile(r"^<!-- run(?P<fmt>:md)?: (?P<cmd>.+?) -->$")


def _expand(cmd: str) -> list[str]:
    args: list[str] = []
    for a in shlex.split(cmd):
        hits = sorted(glob.glob(a, root_dir=ROOT)) if any(c in a for c in "*?[") else []
        args.extend(hits or [a])
    return args


def run(cmd: str) -> str:
    args = _expand(cmd)
    exe = [sys.executable, "-m", "phaseprof.commands.main"] + args[1:] if args[0] == "phaseprof" else args
    env = {**os.environ, "COLUMNS": "140", "NO_COLOR": "1", "TERM": "dumb"}
    res = subprocess.run(exe, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if res.returncode not in (0, 1):
        raise SystemExit(f"{cmd}: exit {res.returncode}\n{res.stderr}")
    return res.stdout.rstrip() + "\n"


def main() -> int:
    out: list[str] = []
    for line in TEMPLATE.read_text().splitlines():
        m = RUN.match(line.strip())
        if not m:
            out.append(line)
            continue
        cmd = m.group("cmd")
        shown = " ".join(shlex.quote(a) if " " in a else a for a in _expand(cmd))
        out += ["```bash", f"$ {shown}", "```"]
        text = run(cmd)
        out += [text] if m.group("fmt") else ["```", text.rstrip(), "```"]
    OUT.write_text("\n".join(out) + "\n")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
