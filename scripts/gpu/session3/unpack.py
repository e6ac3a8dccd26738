"""Put session 3's device files back together: `python scripts/gpu/session3/unpack.py DEST FILES_AT...`.

Each FILES_AT is one device call's folder (collect.sh's output): ``status.tgz`` (logs; a later call's copy
replaces an earlier one) and ``item--NAME.tar`` or ``item--NAME.tar.partNN`` (joined in order, across calls).
Items are extracted to ``DEST/NAME/``, logs to ``DEST/status/``. Prints what it did.
"""

from __future__ import annotations

import io
import re
import sys
import tarfile
from pathlib import Path

PART = re.compile(r"^item--(?P<name>[\w.-]+?)\.tar(?:\.part(?P<n>\d+))?$")


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    dest = Path(argv[0])
    dest.mkdir(parents=True, exist_ok=True)
    parts: dict[str, list[tuple[int, Path]]] = {}
    for folder in map(Path, argv[1:]):
        for f in sorted(folder.iterdir()):
            if f.name == "status.tgz":
                with tarfile.open(f) as tar:
                    tar.extractall(dest / "status", filter="data")
                print(f"status <- {f}")
                continue
            m = PART.match(f.name)
            if m:
                parts.setdefault(m["name"], []).append((int(m["n"] or 0), f))
    for name, items in sorted(parts.items()):
        blob = b"".join(p.read_bytes() for _, p in sorted(items))
        with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
            tar.extractall(dest, filter="data")
        print(f"{name}: {len(items)} part(s), {len(blob) / 1e6:.1f} MB -> {dest / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
