#!/usr/bin/env python
"""Re-write the JSON records committed under ``traces/`` (run.json, sweep.json, handoff.json, ...) without
indentation, so that ``traces/`` stays within its ~12 MB budget: the same JSON values (checked: each file
parses to an equal document before it is replaced), ~230 KB less. Trace files (``traceEvents``) and
``.json.gz`` files are left alone. ``phaseprof`` itself still writes its records indented for people to read.

    python scripts/compact_records.py            # rewrites in place, prints the bytes saved
    python scripts/compact_records.py --check    # exit 1 if any record would shrink
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def compact(doc: object, ascii_only: bool) -> bytes:
    """One line; a file that was pure ASCII stays so (readers that open it with a non-UTF-8 locale still can)."""
    return (json.dumps(doc, separators=(",", ":"), ensure_ascii=ascii_only) + "\n").encode()


def main(argv: list[str]) -> int:
    check = "--check" in argv
    files = subprocess.check_output(["git", "ls-files", "traces"], cwd=ROOT, text=True).split()
    saved, would = 0, []
    for name in files:
        if not name.endswith(".json"):
            continue
        path = ROOT / name
        raw = path.read_bytes()
        doc = json.loads(raw)
        if isinstance(doc, dict) and "traceEvents" in doc:
            continue
        new = compact(doc, raw.isascii())
        if len(new) >= len(raw):
            continue
        if json.loads(new) != doc:
            raise SystemExit(f"{name}: compact form does not parse to the same document")
        would.append(name)
        saved += len(raw) - len(new)
        if not check:
            path.write_bytes(new)
    print(f"{len(would)} record(s), {saved:,} B {'to save' if check else 'saved'}")
    return 1 if check and would else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
