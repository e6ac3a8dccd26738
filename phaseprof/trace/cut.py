"""Cut a small, still-analysable Kineto trace out of a bigger one: the events of a host-clock window.

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
- metadata (``M``) events: all kept, unless ``keep_metadata=False`` (real cut-down traces often lack them).

Used by ``scripts/cut_trace.py`` (the committed fixtures) and by the dashboard's one-step export
(``phaseprof.analysis.step_export``). The output is gzipped deterministically (``mtime=0``).
"""

from __future__ import annotations

import gzip
import json
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


def read_document(src: str | Path) -> Any:
    """The whole JSON document of a trace file (gzipped or not), as plain Python objects."""
    raw = Path(src).read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return orjson.loads(raw)


def cut_document(doc: Any, start_us: float, end_us: float, *, keep_metadata: bool = True) -> tuple[Any, CutStats]:
    """``doc`` with only the events of ``[start_us, end_us)`` (file us); every other top-level key as it is."""
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    kept = select_events(events, start_us, end_us, keep_metadata=keep_metadata)
    out = {k: (kept if k == "traceEvents" else v) for k, v in doc.items()} if isinstance(doc, dict) else kept
    kernels = sum(1 for e in kept if e.get("cat") in ("kernel", "Kernel"))
    return out, CutStats(len(events), len(kept), kernels, start_us, end_us)


def encode(doc: Any, *, gz: bool) -> bytes:
    """JSON bytes as Kineto writes them, gzipped deterministically (``mtime=0``) when ``gz``."""
    # json's ", " / ": " separators, as Kineto writes them: HTA finds a file's rank with the regex
    # '"rank":\s+(\d+)' and silently falls back to rank 0 on compact JSON.
    data = json.dumps(doc, ensure_ascii=False, separators=(", ", ": ")).encode("utf-8")
    return gzip.compress(data, compresslevel=9, mtime=0) if gz else data


def cut_trace(src: Path, dest: Path, start_us: float, end_us: float, *, keep_metadata: bool = True) -> CutStats:
    """Write the events of ``src`` in ``[start_us, end_us)`` (file us) to ``dest`` (gzipped if ``.gz``)."""
    out, stats = cut_document(read_document(src), start_us, end_us, keep_metadata=keep_metadata)
    atomic_write_bytes(dest, encode(out, gz=dest.name.endswith(".gz")))
    dest.chmod(0o644)  # mkstemp makes 0600 files; fixtures are committed
    return stats
