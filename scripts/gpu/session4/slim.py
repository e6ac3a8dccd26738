"""Slim copies of Kineto traces for transport: `python3 slim.py SRC_DIR DEST_DIR` (recursive).

Every `*.pt.trace.json.gz` / `trace.json.gz` under SRC_DIR is rewritten under DEST_DIR (same relative path)
without the `python_function` events that are not `nn.Module: ` frames, and without launch flow events
(`ac2g`: kernels pair with their launch calls through `args.correlation`, which stays). Other files (run.json,
breakdowns, logs) are copied, logs gzipped. Prints event counts before/after per file.
"""

from __future__ import annotations

import gzip
import shutil
import sys
from pathlib import Path

import orjson


def keep(e: dict) -> bool:
    if e.get("cat") == "python_function":
        return str(e.get("name", "")).startswith("nn.Module: ")
    return e.get("cat") != "ac2g"


def main(src: Path, dest: Path) -> None:
    for p in sorted(src.rglob("*")):
        if not p.is_file():
            continue
        out = dest / p.relative_to(src)
        out.parent.mkdir(parents=True, exist_ok=True)
        if p.name.endswith(".json.gz") and "trace" in p.name:
            doc = orjson.loads(gzip.decompress(p.read_bytes()))
            ev = doc.get("traceEvents", [])
            doc["traceEvents"] = [e for e in ev if keep(e)]
            out.write_bytes(gzip.compress(orjson.dumps(doc), 6))
            print(f"{p.relative_to(src)}: {len(ev)} -> {len(doc['traceEvents'])} events, "
                  f"{p.stat().st_size} -> {out.stat().st_size} B", flush=True)
        elif p.suffix in (".log", ".txt"):
            with p.open("rb") as f, gzip.open(str(out) + ".gz", "wb") as g:
                shutil.copyfileobj(f, g)
        else:
            shutil.copy2(p, out)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
