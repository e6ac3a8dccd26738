"""Build session 4's committed fixtures from the raw device outputs: `python scripts/gpu/session4/make_fixtures.py`.

Reads `h200-out/session4/` (git-ignored: the files as the device returned them, see INDEX.md there) and writes:

- `traces/h200/hooks/`: phaseprof's own captures with the module tree from module hooks (`--hierarchy hooks`,
  the default): eager prefill 4096 (whole), graph prefill 4096 (whole), three graph
  decode steps. Launch flow events (`ac2g`) dropped: kernels pair with launches through `args.correlation`.
- `traces/h200/server-graph/`: run.json + breakdown.json of `phaseprof capture --server` against a graph-mode
  `vllm serve` (prefill 4096, decode 4096+32) and the `sweep --server` prefill record; no traces (the session 3
  server traces in `traces/h200/server-tp1/` stand for them).
- `traces/h200x2/server-tp2-ep/`: TP2 + expert-parallel (eager) `vllm serve` through `phaseprof capture
  --server`: run.json + rank breakdowns of prefill and decode; decode step 1 of both ranks, with `ac2g` flows,
  ATen `cpu_op` events and non-module `python_function` frames dropped (the nn.Module tree, launches, kernels,
  collectives and step annotations stay).

Every cut is `phaseprof.trace.cut`'s step window (as `scripts/cut_trace.py --steps`), then the event filter,
written with gzip level 9, mtime 0. Prints what it wrote.
"""

from __future__ import annotations

import gzip
import shutil
import sys
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from cut_trace import step_window_us  # noqa: E402

from phaseprof.trace.cut import cut_document, read_document  # noqa: E402

RAW = ROOT / "h200-out" / "session4"


def one(pattern: str) -> Path:
    hits = sorted(RAW.glob(pattern))
    assert len(hits) == 1, (pattern, hits)
    return hits[0]


def no_flows(e: dict) -> bool:
    return e.get("cat") != "ac2g"


def modules_only(e: dict) -> bool:
    """Launches, kernels, collectives, annotations and the nn.Module frames; no ATen ops or other frames."""
    cat = e.get("cat")
    if cat in ("ac2g", "cpu_op", "cpu_instant_event"):
        return False
    if cat == "python_function":
        return str(e.get("name", "")).startswith("nn.Module: ")
    return True


def write(src: Path, dest: Path, keep, steps: tuple[int, int] | None = None) -> None:
    doc = read_document(src)
    if steps is not None:
        start, end = step_window_us(src, *steps)
        doc, _ = cut_document(doc, start, end)
    before = len(doc["traceEvents"])
    doc["traceEvents"] = [e for e in doc["traceEvents"] if keep(e)]
    dest.parent.mkdir(parents=True, exist_ok=True)
    with dest.open("wb") as f, gzip.GzipFile(fileobj=f, mode="wb", compresslevel=9, mtime=0, filename="") as g:
        g.write(orjson.dumps(doc))
    print(f"{dest.relative_to(ROOT)}: {len(doc['traceEvents'])} of {before} events"
          f"{'' if steps is None else f' (steps {steps[0]}:{steps[1]})'}, {dest.stat().st_size:,} B")


def copy(src: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, dest)


def main() -> int:
    hooks = ROOT / "traces" / "h200" / "hooks"
    for mode, src_item in (("eager", "eager-hooks"), ("graph", "graph-hooks")):
        pre = one(f"{src_item}/*-prefill-4096")
        dec = one(f"{src_item}/*-decode-4096in-32out")
        d = hooks / f"{mode}-prefill-4096"
        for n in ("run.json", "breakdown.json"):
            copy(pre / n, d / n)
        write(pre / "trace.json.gz", d / "trace.json.gz", no_flows)
        if mode == "eager":  # its trace lost the module tree to the 5 MB trim (run.json says so): not kept
            continue
        d = hooks / "graph-decode-4096in-32out-steps1-4"
        copy(dec / "run.json", d / "run.json")
        write(dec / "trace.json.gz", d / "trace.json.gz", no_flows, (1, 4))
    srv = ROOT / "traces" / "h200" / "server-graph"
    for phase in ("prefill-4096", "decode-4096in-32out"):
        r = one(f"server-graph/runs/*-server-*-{phase}")
        for n in ("run.json", "breakdown.json"):
            copy(r / n, srv / phase / n)
    sw = one("server-graph/runs/*-sweep-prefill-512-4096")
    for n in ("sweep.json", "plot.json"):
        copy(sw / n, srv / "sweep-prefill-512-4096" / n)
    copy(RAW / "server-graph" / "serve.json", srv / "serve.json")
    ep = ROOT / "traces" / "h200x2" / "server-tp2-ep"
    for phase in ("prefill-4096", "decode-4096in-32out"):
        r = one(f"server-tp2-ep-slim/runs/*-server-*-{phase}")
        for n in ("run.json", "rank0.breakdown.json", "rank1.breakdown.json"):
            copy(r / n, ep / phase / n)
        if phase.startswith("decode"):
            for rank in (0, 1):
                src = one(f"server-tp2-ep-slim/runs/*-{phase}/ranks/*_rank{rank}.*.pt.trace.json.gz")
                write(src, ep / "decode-step1" / f"{src.name.split('.')[0]}.step1.pt.trace.json.gz",
                      modules_only, (1, 2))
    copy(RAW / "server-tp2-ep-slim" / "serve.json", ep / "serve.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
