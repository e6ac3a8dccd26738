#!/usr/bin/env python
"""Re-encode committed gzip traces with zopfli (same gzip format, ~15 % smaller), so `traces/` stays ≲ 12 MB.

    pip install zopfli && python scripts/recompress_traces.py [--min-kb 100] [--dry-run] [FILE ...]

For every `*.gz` under `traces/` of at least `--min-kb` (or only the FILEs named, whatever their size): deflate
the decompressed bytes again with zopfli (one iteration), check that the result decompresses to exactly the same
bytes, and replace the file only when smaller. A breakdown.json or run.json under `traces/` that records the old
file's sha256 (phaseprof hashes the file as stored) gets the new one, so records keep pointing at the file they
describe. Prints each file.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    import zopfli.gzip  # noqa: PLC0415 - a one-off tool, not a phaseprof dependency

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--min-kb", type=int, default=100)
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("files", nargs="*", type=Path, help="only these .gz files under traces/ (default: all)")
    args = ap.parse_args(argv)
    traces = ROOT / "traces"
    records = [p for p in traces.rglob("*.json") if p.name.endswith(("breakdown.json", "run.json"))]
    saved = 0
    chosen = [f.resolve() for f in args.files] or sorted(traces.rglob("*.gz"), key=lambda q: -q.stat().st_size)
    for p in chosen:
        old = p.read_bytes()
        if not args.files and len(old) < args.min_kb * 1024:
            continue
        data = gzip.decompress(old)
        new = zopfli.gzip.compress(data, numiterations=1)
        if gzip.decompress(new) != data or len(new) >= len(old):
            print(f"{p.relative_to(ROOT)}: kept ({len(old):,} B)")
            continue
        old_sha, new_sha = hashlib.sha256(old).hexdigest(), hashlib.sha256(new).hexdigest()
        saved += len(old) - len(new)
        print(f"{p.relative_to(ROOT)}: {len(old):,} -> {len(new):,} B", flush=True)
        if args.dry_run:
            continue
        p.write_bytes(new)
        _note_size(p, len(old), len(new))
        for r in records:
            text = r.read_text()
            if old_sha in text:
                r.write_text(text.replace(old_sha, new_sha))
                print(f"  sha256 updated in {r.relative_to(ROOT)}")
    print(f"saved {saved:,} B")
    return 0


def _note_size(trace: Path, old: int, new: int) -> None:
    """A run.json beside ``trace`` that records its gzipped size (``trace.gz_bytes``) gets the new size, and
    ``trace.recompressed`` says so (the capture wrote ``old`` bytes: same content, another deflate stream)."""
    run = trace.parent / "run.json"
    if not run.is_file():
        return
    doc = json.loads(run.read_text())
    t = doc.get("trace")
    if not isinstance(t, dict) or t.get("file") != trace.name or t.get("gz_bytes") != old:
        return
    t["gz_bytes"] = new
    if t.get("recompressed"):  # re-encoded before: its note names the size as captured; keep it
        t["recompressed"] += f"; zopfli again: {old:,} -> {new:,} B, same content"
    else:
        t["recompressed"] = f"zopfli (scripts/recompress_traces.py): {old:,} B as captured, same content"
    run.write_text(json.dumps(doc, separators=(",", ":")) + "\n")  # compact: scripts/compact_records.py
    print(f"  gz_bytes updated in {run.relative_to(ROOT)}")


if __name__ == "__main__":
    sys.exit(main())
