#!/usr/bin/env python
"""Cut a small, still-analysable trace out of a Kineto chrome trace: a time window or a range of steps.

Events are only *selected*, never modified; top-level keys (``deviceProperties``, ``distributedInfo``, versions)
are kept as they are. Selection, for a host-clock window ``[start, end)`` in the file's microseconds:

- host ``X`` events (CPU ops, annotations, Python frames): kept if they overlap the window, so the op stack
  above the first events in the window stays whole; runtime/driver calls: kept if they *start* in it
  (phaseprof assigns GPU work to the step in which its launch call started);
- GPU kernels/memcpys/memsets: kept if the runtime call that launched them (same correlation id) is kept, so
  work launched in the window is kept whole even when it runs after it; activities with no launch call in
  the file are kept if they start in the window;
- GPU annotations: kept with their host annotation (same ``External id``), else if they overlap the window;
- launch flows (``ac2g``, legacy ``async``): kept with their correlation id; other flows and instant/counter
  events (``[memory]``, ...): kept if their ``ts`` is in the window;
- metadata (``M``) events: all kept, unless ``--no-metadata`` (real cut-down traces often lack them).

``--steps A:B`` (Python slice, half-open) resolves to the host window of phaseprof's steps A..B-1 (markers or
inferred), printed so that the cut can be repeated with ``--abs-window``. The output is written atomically and
gzipped deterministically (``mtime=0``), so the same command gives the same bytes.

Usage::

    python scripts/cut_trace.py SRC.json.gz DEST.json.gz --steps 3:5
    python scripts/cut_trace.py SRC.json.gz DEST.json.gz --window 1200:4800     # us from the first event
    python scripts/cut_trace.py SRC.json.gz DEST.json.gz --abs-window 3676600034000.5:3676600072000
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from phaseprof.io import atomic_write_bytes

GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"})
RUNTIME_CATS = frozenset({"cuda_runtime", "cuda_driver", "Runtime"})
GPU_ANNOTATION_CATS = frozenset({"gpu_user_annotation"})
LAUNCH_FLOW_CATS = frozenset({"ac2g", "async"})
FLOW_PHASES = frozenset({"s", "f", "t"})


@dataclass(frozen=True)
class CutStats:
    """What a cut kept: event counts in and out, and the absolute window (file us)."""

    events_in: int
    events_out: int
    kernels_out: int
    start_us: float
    end_us: float


def _key(v: Any) -> Any:
    """Correlation / external ids as ints where possible (ROCm sometimes writes them as strings)."""
    if isinstance(v, str) and v.lstrip("-").isdigit():
        return int(v)
    return v


def _args(e: dict[str, Any]) -> dict[str, Any]:
    a = e.get("args")
    return a if isinstance(a, dict) else {}


def _external_id(e: dict[str, Any]) -> Any:
    a = _args(e)
    return _key(a.get("External id", a.get("external id")))


def trace_origin_us(events: Iterable[dict[str, Any]]) -> float:
    """The smallest ``ts`` of any complete (``X``) event: what ``--window`` is relative to."""
    return min(float(e["ts"]) for e in events if e.get("ph") == "X" and e.get("ts") is not None)


def select_events(events: list[dict[str, Any]], start_us: float, end_us: float, *,
                  keep_metadata: bool = True) -> list[dict[str, Any]]:
    """The events of ``events`` (in their original order, unmodified) that belong to ``[start_us, end_us)``.

    See the module docstring for the rules. Pure: the input list and its dicts are not changed.
    """
    def starts_in(e: dict[str, Any]) -> bool:
        ts = e.get("ts")
        return ts is not None and start_us <= float(ts) < end_us

    def overlaps(e: dict[str, Any]) -> bool:
        ts = e.get("ts")
        if ts is None:
            return False
        t0 = float(ts)
        t1 = t0 + float(e.get("dur") or 0)
        return t0 < end_us and (t1 > start_us or (t1 == t0 and t0 >= start_us))

    all_corr: set[Any] = set()
    kept_corr: set[Any] = set()
    host_annotation_ids: set[Any] = set()
    kept_annotation_ids: set[Any] = set()
    keep = [False] * len(events)
    # Pass 1: host events decide; remember which correlation / external ids survived.
    for i, e in enumerate(events):
        ph, cat = e.get("ph"), e.get("cat")
        if ph != "X" or cat in GPU_CATS or cat in GPU_ANNOTATION_CATS:
            continue
        if cat in RUNTIME_CATS:
            corr = _key(_args(e).get("correlation"))
            if corr is not None:
                all_corr.add(corr)
            if starts_in(e):
                keep[i] = True
                if corr is not None:
                    kept_corr.add(corr)
            continue
        if cat == "user_annotation":
            ext = _external_id(e)
            if ext is not None:
                host_annotation_ids.add(ext)
        if overlaps(e):
            keep[i] = True
            if cat == "user_annotation" and (ext := _external_id(e)) is not None:
                kept_annotation_ids.add(ext)
    # Pass 2: GPU activities, GPU annotations, flows, instants and metadata follow the host decisions.
    for i, e in enumerate(events):
        if keep[i]:
            continue
        ph, cat = e.get("ph"), e.get("cat")
        if ph == "M":
            keep[i] = keep_metadata
        elif ph == "X" and cat in GPU_CATS:
            corr = _key(_args(e).get("correlation"))
            keep[i] = corr in kept_corr if corr in all_corr else starts_in(e)
        elif ph == "X" and cat in GPU_ANNOTATION_CATS:
            ext = _external_id(e)
            keep[i] = ext in kept_annotation_ids if ext in host_annotation_ids else overlaps(e)
        elif ph in FLOW_PHASES:
            fid = _key(e.get("id"))
            keep[i] = fid in kept_corr if (cat in LAUNCH_FLOW_CATS and fid in all_corr) else starts_in(e)
        elif ph == "X":
            keep[i] = overlaps(e)
        elif e.get("ts") is None:
            keep[i] = True  # nothing to place it in time by: keep it
        else:
            keep[i] = starts_in(e)
    return [e for e, k in zip(events, keep) if k]


def step_window_us(path: Path, first: int, stop: int) -> tuple[float, float]:
    """Host window (file us) covering phaseprof's steps ``first .. stop-1`` of the trace at ``path``."""
    import numpy as np

    from phaseprof.analysis.steps import detect_steps
    from phaseprof.classify.classifier import classify_kernels
    from phaseprof.classify.rules import load_rules
    from phaseprof.trace.correlate import correlate
    from phaseprof.trace.tables import load_tables

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


def cut_trace(src: Path, dest: Path, start_us: float, end_us: float, *, keep_metadata: bool = True) -> CutStats:
    """Write the events of ``src`` in ``[start_us, end_us)`` (file us) to ``dest`` (gzipped if ``.gz``)."""
    raw = src.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    doc = orjson.loads(raw)
    del raw
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    kept = select_events(events, start_us, end_us, keep_metadata=keep_metadata)
    if isinstance(doc, dict):
        out = {k: (kept if k == "traceEvents" else v) for k, v in doc.items()}
    else:
        out = kept
    # json's ", " / ": " separators, as Kineto writes them: HTA finds a file's rank with the regex
    # '"rank":\s+(\d+)' and silently falls back to rank 0 on compact JSON.
    data = json.dumps(out, ensure_ascii=False, separators=(", ", ": ")).encode("utf-8")
    if dest.name.endswith(".gz"):
        data = gzip.compress(data, compresslevel=9, mtime=0)
    atomic_write_bytes(dest, data)
    dest.chmod(0o644)  # mkstemp makes 0600 files; fixtures are committed
    kernels = sum(1 for e in kept if e.get("cat") in ("kernel", "Kernel"))
    return CutStats(len(events), len(kept), kernels, start_us, end_us)


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
    st = cut_trace(a.src, a.dest, start, end, keep_metadata=not a.no_metadata)
    print(f"{a.dest}: kept {st.events_out} of {st.events_in} events ({st.kernels_out} kernels), "
          f"window --abs-window {st.start_us!r}:{st.end_us!r}, {a.dest.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
