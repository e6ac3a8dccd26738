#!/usr/bin/env python
"""Cut a small, still-analysable trace out of a Kineto chrome trace: a time window or a range of steps.

Which events a window keeps (host ops that overlap it, launch calls that start in it, the GPU work those
launched, their flows and annotations; metadata unless ``--no-metadata``) is ``phaseprof.trace.cut``'s rule,
documented there once; the dashboard's one-step export uses the same function.

``--no-flows`` also leaves out the launch flow events (``ac2g``, Kineto's arrows from a launch call to its GPU work):
phaseprof and HTA pair GPU work with its launch through ``args.correlation``, which every kernel and runtime event
keeps; a CUDA-graph replay has one flow per replayed kernel, so flows are up to a fifth of a gzipped trace.

``--steps A:B`` (Python slice, half-open) resolves to the host window of phaseprof's steps A..B-1 (markers or
inferred), printed so that the cut can be repeated with ``--abs-window``. The output is written atomically and
gzipped deterministically (``mtime=0``), so the same command gives the same bytes.

Usage::

    python scripts/cut_trace.py SRC.json.gz DEST.json.gz --steps 3:5
    python scripts/cut_trace.py SRC.json.gz DEST.json.gz --window 1200:4800     # us from the first event
    python scripts/cut_trace.py SRC.json.gz DEST.json.gz --abs-window 3676600034000.5:3676600072000
    python scripts/cut_trace.py SRC.json.gz DEST.json.gz --steps 0:3 --no-flows
"""

from __future__ import annotations

import argparse
import gzip
import sys
from pathlib import Path

import orjson

# The selection lives in the package (the dashboard's step export uses it too); re-exported for the tests.
from phaseprof.io import atomic_write_bytes
from phaseprof.trace.cut import (CutStats, cut_document, cut_trace, encode, read_document,  # noqa: F401
                                 select_events, trace_origin_us)

FLOW_CATEGORY = "ac2g"  # Kineto's launch -> GPU work flow events ('s' at the launch, 'f' at each kernel)


def cut_trace_without_flows(src: Path, dest: Path, start_us: float, end_us: float, *,
                            keep_metadata: bool = True) -> CutStats:
    """``cut_trace``, and the launch flow events of the window left out too (``events_out`` counts what is kept)."""
    out, stats = cut_document(read_document(src), start_us, end_us, keep_metadata=keep_metadata)
    listed = isinstance(out, list)
    kept = [e for e in (out if listed else out["traceEvents"]) if e.get("cat") != FLOW_CATEGORY]
    out = kept if listed else {**out, "traceEvents": kept}
    atomic_write_bytes(dest, encode(out, gz=dest.name.endswith(".gz")))
    dest.chmod(0o644)
    return CutStats(stats.events_in, len(kept), stats.kernels_out, stats.start_us, stats.end_us)


def step_window_us(path: Path, first: int, stop: int) -> tuple[float, float]:
    """Host window (file us) covering phaseprof's steps ``first .. stop-1`` of the trace at ``path``."""
    import numpy as np

    from phaseprof.analysis.steps import detect_steps
    from phaseprof.classify.classifier import classify_kernels
    from phaseprof.classify.rules import load_rules
    from phaseprof.trace.correlate import correlate
    from phaseprof.trace.read import load_tables

    t = load_tables(path)
    c = correlate(t)
    buckets = classify_kernels(t.gpu["name"].astype(str), load_rules()) if not t.gpu.empty else []
    det = detect_steps(ops=t.ops, runtime=t.runtime, gpu=t.gpu, gpu_launch=c.gpu_launch,
                       kernel_buckets=np.asarray([str(b) for b in buckets], dtype=object))
    steps = det.steps[first:stop]
    if not steps:
        raise SystemExit(f"{path}: steps {first}:{stop} out of range ({len(det.steps)} steps, {det.method})")
    lo_ns = min(s.host_start_ns for s in steps)
    hi_ns = max(s.host_end_ns for s in steps)
    ts = t.gpu["ts_ns"].tolist() + t.runtime["ts_ns"].tolist() + t.ops["ts_ns"].tolist()
    lo_ns = max(lo_ns, min(ts))  # an open first/last step ends at the trace's edge
    hi_ns = min(hi_ns, max(ts) + 1)
    print(f"steps {first}:{stop} of {len(det.steps)} ({det.method})", file=sys.stderr)
    return t.meta.origin_us + lo_ns / 1000.0, t.meta.origin_us + hi_ns / 1000.0


def _pair(text: str) -> tuple[str, str]:
    a, sep, b = text.partition(":")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected A:B, got {text!r}")
    return a, b


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("src", type=Path)
    p.add_argument("dest", type=Path)
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--window", type=_pair, help="START:END in us from the first event of the trace")
    how.add_argument("--abs-window", type=_pair, help="START:END in the file's own us timestamps")
    how.add_argument("--steps", type=_pair, help="A:B: phaseprof's steps A..B-1 (half-open, like a slice)")
    p.add_argument("--no-metadata", action="store_true", help="drop the 'M' (process/thread name) events")
    p.add_argument("--no-flows", action="store_true", help="drop the launch flow events (cat 'ac2g') too")
    a = p.parse_args(argv)
    if a.steps:
        start, end = step_window_us(a.src, int(a.steps[0] or 0), int(a.steps[1] or 1 << 30))
    elif a.window:
        raw = a.src.read_bytes()
        events = orjson.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
        origin = trace_origin_us(events["traceEvents"] if isinstance(events, dict) else events)
        del raw, events
        start, end = origin + float(a.window[0]), origin + float(a.window[1])
    else:
        start, end = float(a.abs_window[0]), float(a.abs_window[1])
    cut = cut_trace_without_flows if a.no_flows else cut_trace
    st = cut(a.src, a.dest, start, end, keep_metadata=not a.no_metadata)
    print(f"{a.dest}: kept {st.events_out} of {st.events_in} events ({st.kernels_out} kernels), "
          f"window --abs-window {st.start_us!r}:{st.end_us!r}, {a.dest.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
