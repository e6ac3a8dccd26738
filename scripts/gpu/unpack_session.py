"""Reassemble what ``h200_session.py`` sent back into run directories.

    python scripts/gpu/unpack_session.py FILES_AT DEST        # e.g. DEST = traces/h200

FILES_AT holds ``h200-<mode>-bundle.tar.gz``, ``trace--<run dir>.json.gz``, ``h200-<mode>.log`` and
``h200-<mode>-summary.json`` for one or both modes. Result: ``DEST/<mode>/<run dir>/{trace.json.gz,run.json,
breakdown.json}``, the sweep directories, and ``DEST/<mode>/{startup.json,timing-benchmark.json,vllm-log.txt,
session.log,summary.json}``. Trace files go to the run directory whose name they carry.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tarfile
from pathlib import Path


def unpack(files_at: Path, dest: Path) -> list[Path]:
    written: list[Path] = []
    for bundle in sorted(files_at.glob("h200-*-bundle.tar.gz")):
        mode = bundle.name[len("h200-"):-len("-bundle.tar.gz")]
        with tarfile.open(bundle) as tar:
            for member in tar.getmembers():
                if not member.isfile() or ".." in Path(member.name).parts:
                    continue
                rel = Path(*Path(member.name).parts[1:])  # drop the "h200-<mode>/" prefix
                target = dest / mode / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                with tar.extractfile(member) as src:  # type: ignore[union-attr]
                    target.write_bytes(src.read())
                written.append(target)
        for name, new in ((f"h200-{mode}.log", "session.log"), (f"h200-{mode}-summary.json", "summary.json")):
            if (files_at / name).is_file():
                shutil.copyfile(files_at / name, dest / mode / new)
                written.append(dest / mode / new)
        for trace in sorted(files_at.glob("trace--*.json.gz")):
            parts = trace.name[len("trace--"):-len(".json.gz")].split("--")
            home = dest / mode / Path(*parts)
            if home.is_dir() and (home / "run.json").is_file():
                shutil.copyfile(trace, home / "trace.json.gz")
                written.append(home / "trace.json.gz")
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files_at", type=Path)
    ap.add_argument("dest", type=Path)
    args = ap.parse_args(argv)
    written = unpack(args.files_at, args.dest)
    for p in written:
        print(p)
    if not written:
        print(f"nothing to unpack in {args.files_at}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
