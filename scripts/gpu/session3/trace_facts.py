"""Key facts of Kineto traces, for INDEX.md: `python scripts/gpu/session3/trace_facts.py TRACE.json.gz...`.

Per file: gzipped size, events, events per category, kernels, python_function events and how many of them are
``nn.Module:`` frames (distinct module instances, decoder layers), vLLM step annotations
(``execute_context_*``), phaseprof step markers, ``capture_*`` labels. Prints one JSON object per file.
"""

from __future__ import annotations

import collections
import gzip
import json
import re
import sys
from pathlib import Path
from typing import Any

import orjson

LAYER = re.compile(r"^nn\.Module: (\w*DecoderLayer)_(\d+)$")


def facts(path: Path) -> dict[str, Any]:
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    doc = orjson.loads(raw)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    cats = collections.Counter(str(e.get("cat")) for e in events)
    py = [e["name"] for e in events if e.get("cat") == "python_function"]
    mods = [n for n in py if n.startswith("nn.Module: ")]
    layers = {m.group(2) for n in mods if (m := LAYER.match(n))}
    ann = [e["name"] for e in events if e.get("cat") == "user_annotation"]
    vllm_steps = [n for n in ann if n.startswith("execute_context_")]
    pp_steps = [n for n in ann if n.startswith("phaseprof_step#")]
    caps = [n for n in ann if n.startswith("capture_")]
    return {
        "file": str(path), "gz_bytes": path.stat().st_size, "json_bytes": len(raw), "events": len(events),
        "by_cat": dict(cats.most_common()), "kernels": cats.get("kernel", 0),
        "python_function": len(py), "nn_module_events": len(mods),
        "nn_module_instances": len(set(mods)), "decoder_layers": len(layers),
        "vllm_steps": vllm_steps, "phaseprof_steps": pp_steps, "capture_labels": caps,
        "graph_launches": sum(1 for e in events if e.get("name") in ("cudaGraphLaunch", "cuGraphLaunch")),
        "top_keys": sorted(k for k in doc if k != "traceEvents") if isinstance(doc, dict) else [],
        "with_stack": doc.get("with_stack") if isinstance(doc, dict) else None,
    }


def main(argv: list[str]) -> int:
    for a in argv:
        print(json.dumps(facts(Path(a))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
