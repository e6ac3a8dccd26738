"""Turn decoded events into columnar tables (one pandas DataFrame per event family).

Timestamps become integer nanoseconds from the trace's first event (``ts_ns``), so nanosecond-resolution
traces keep their resolution (HTA rounds to whole microseconds by default and loses time on short kernels).
Legacy category names (``Kernel``, ``Runtime``, ``Operator``, ``Memcpy``, ``Memset``) map onto today's.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from phaseprof.errors import TraceError
from phaseprof.trace.load import decode_trace, read_trace_bytes
from phaseprof.trace.schema import Event, TraceDoc

# category -> (family, kind)
_CATEGORIES: dict[str | None, tuple[str, str]] = {
    "kernel": ("gpu", "kernel"), "Kernel": ("gpu", "kernel"),
    "gpu_memcpy": ("gpu", "memcpy"), "Memcpy": ("gpu", "memcpy"),
    "gpu_memset": ("gpu", "memset"), "Memset": ("gpu", "memset"),
    "cuda_runtime": ("runtime", "runtime"), "Runtime": ("runtime", "runtime"),
    "cuda_driver": ("runtime", "driver"),
    "cpu_op": ("ops", "cpu_op"), "Operator": ("ops", "cpu_op"),
    "user_annotation": ("ops", "user_annotation"),
    "gpu_user_annotation": ("gpu_annotations", "gpu_user_annotation"),
}
FAMILIES = ("gpu", "runtime", "ops", "gpu_annotations")


@dataclass(frozen=True)
class TraceMeta:
    """Facts about the trace file and the machine that recorded it."""

    path: str
    sha256: str
    decompressed_bytes: int
    event_count: int
    platform: str  # "cuda" | "rocm" | "cpu" (no GPU activity at all)
    gpu_name: str | None
    device_properties: list[dict[str, Any]]
    distributed: dict[str, Any]
    versions: dict[str, str]  # cuda/hip runtime+driver, cupti, vllm when known
    origin_us: float  # trace-clock time of ts_ns == 0, in the file's microseconds
    has_memory_events: bool
    process_names: dict[str, str] = field(default_factory=dict)
    capture: dict[str, Any] = field(default_factory=dict)  # phaseprof capture metadata if embedded


@dataclass(frozen=True)
class EventTables:
    """All events phaseprof uses, as columns. Times in ns since ``meta.origin_us``; ``end_ns = ts_ns + dur_ns``.

    - ``gpu``: kernels, memcpys, memsets (``kind``), with ``device``, ``stream``, ``correlation``, ``bytes``.
    - ``runtime``: CUDA/HIP runtime and driver API calls on host threads (``cudaLaunchKernel``, ``cudaGraphLaunch``, ...).
    - ``ops``: CPU ops and user annotations (``record_function``), with ``external_id``.
    - ``gpu_annotations``: GPU-timeline projections of annotations.
    - ``memory``: allocator events (``[memory]``): ``bytes`` > 0 allocation, < 0 free.
    """

    meta: TraceMeta
    gpu: pd.DataFrame
    runtime: pd.DataFrame
    ops: pd.DataFrame
    gpu_annotations: pd.DataFrame
    memory: pd.DataFrame


def _to_int(v: object, default: int) -> int:
    if v is None:
        return default
    if isinstance(v, str):  # ROCm writes some numbers as strings; legacy tids look like "stream 7"
        return int(v) if v.lstrip("-").isdigit() else default
    return int(v)


def _int_or(values: list, default: int = -1) -> np.ndarray:
    if all(v is None or type(v) is int for v in values):
        return np.array([default if v is None else v for v in values], dtype=np.int64)
    return np.array([_to_int(v, default) for v in values], dtype=np.int64)


def _family_frame(events: list[Event], kinds: list[str], origin_us: float, path: str) -> pd.DataFrame:
    n = len(events)
    ts = np.array([e.ts for e in events], dtype=np.float64) if n else np.zeros(0)
    dur = np.array([0.0 if e.dur is None else e.dur for e in events], dtype=np.float64) if n else np.zeros(0)
    if n and np.isnan(ts).any():
        raise TraceError("complete ('X') event without a timestamp", path=path)
    if n and (dur < 0).any():
        bad = int(np.argmax(dur < 0))
        raise TraceError(f"negative duration on {int((dur < 0).sum())} event(s), first: "
                         f"{str(events[bad].name)[:60]!r} dur={dur[bad]}", path=path)
    ts_ns = np.rint((ts - origin_us) * 1000.0).astype(np.int64)
    dur_ns = np.rint(dur * 1000.0).astype(np.int64)
    args = [e.args for e in events]
    empty = _EMPTY_ARGS
    args = [a if a is not None else empty for a in args]
    ext = [a.external_id if a.external_id is not None else a.external_id_legacy for a in args]
    frame = pd.DataFrame({
        "kind": pd.Categorical(kinds),
        "name": pd.Categorical([str(e.name) for e in events]),
        "pid": pd.Categorical([str(e.pid) for e in events]),
        "tid": pd.Categorical([str(e.tid) for e in events]),
        "ts_ns": ts_ns,
        "dur_ns": dur_ns,
        "end_ns": ts_ns + dur_ns,
        "correlation": _int_or([a.correlation for a in args]),
        "external_id": _int_or(ext),
        "device": _int_or([a.device for a in args]),
        "stream": _int_or([a.stream for a in args]),
        "bytes": _int_or([a.bytes for a in args], default=0),
    })
    return frame


def _memory_frame(events: list[Event], origin_us: float) -> pd.DataFrame:
    args = [e.args if e.args is not None else _EMPTY_ARGS for e in events]
    ts = np.array([e.ts or 0.0 for e in events], dtype=np.float64)
    return pd.DataFrame({
        "ts_ns": np.rint((ts - origin_us) * 1000.0).astype(np.int64),
        "pid": pd.Categorical([str(e.pid) for e in events]),
        "tid": pd.Categorical([str(e.tid) for e in events]),
        "bytes": _int_or([a.mem_bytes for a in args], default=0),
        "total_allocated": _int_or([a.total_allocated for a in args]),
        "device_type": _int_or([a.device_type for a in args]),
        "device_id": _int_or([a.device_id for a in args]),
    })


from phaseprof.trace.schema import Args as _Args  # noqa: E402

_EMPTY_ARGS = _Args()


def _versions(doc: TraceDoc) -> dict[str, str]:
    keys = ("cupti_version", "cuda_runtime_version", "cuda_driver_version", "hip_runtime_version",
            "hip_driver_version", "roctracer_version", "vllm_version", "schemaVersion")
    return {k: str(getattr(doc, k)) for k in keys if getattr(doc, k) is not None}


def build_tables(doc: TraceDoc, *, path: str, sha256: str, decompressed_bytes: int) -> EventTables:
    """Split decoded events into families and build their tables."""
    groups: dict[str, list[Event]] = {f: [] for f in FAMILIES}
    kinds: dict[str, list[str]] = {f: [] for f in FAMILIES}
    memory: list[Event] = []
    process_names: dict[str, str] = {}
    cats = _CATEGORIES
    for e in doc.traceEvents or ():
        fk = cats.get(e.cat)
        if fk is not None:
            if e.ph == "X" and e.ts is not None:
                groups[fk[0]].append(e)
                kinds[fk[0]].append(fk[1])
        elif e.ph == "i" and e.name == "[memory]":
            memory.append(e)
        elif e.ph == "M" and e.name == "process_name" and e.args is not None and e.args.name:
            process_names[str(e.pid)] = e.args.name
    starts = [g[0].ts for g in groups.values() if g]
    if not starts and not memory:
        raise TraceError("no kernels, runtime calls or CPU ops found: nothing to analyse", path=path)
    origin = min(min(e.ts for e in g) for g in groups.values() if g) if starts else min(e.ts or 0 for e in memory)
    frames = {f: _family_frame(groups[f], kinds[f], origin, path) for f in FAMILIES}
    gpu = frames["gpu"]
    runtime_names = frames["runtime"]["name"].astype(str)
    is_rocm = doc.hip_runtime_version is not None or bool(runtime_names.str.startswith("hip").any())
    platform = "cpu" if gpu.empty else ("rocm" if is_rocm else "cuda")
    props = doc.deviceProperties or []
    gpu_name = None
    if not gpu.empty and props:
        used = int(gpu["device"].mode().iloc[0]) if (gpu["device"] >= 0).any() else 0
        match = [p for p in props if p.get("id") == used] or props
        gpu_name = match[0].get("name") or None
        if gpu_name is None and is_rocm:
            gpu_name = f"AMD GPU (gfx{match[0].get('computeMajor', '?')}{match[0].get('computeMinor', '')})"
    meta = TraceMeta(
        path=path, sha256=sha256, decompressed_bytes=decompressed_bytes,
        event_count=len(doc.traceEvents or ()), platform=platform, gpu_name=gpu_name,
        device_properties=props, distributed=doc.distributedInfo or {}, versions=_versions(doc),
        origin_us=float(origin), has_memory_events=bool(memory), process_names=process_names,
        capture=doc.phaseprof or {},
    )
    return EventTables(meta=meta, gpu=gpu, runtime=frames["runtime"], ops=frames["ops"],
                       gpu_annotations=frames["gpu_annotations"], memory=_memory_frame(memory, origin))


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector: decoding allocates ~2 objects per event, none in a cycle, and each
    allocation burst would otherwise trigger collections that rescan every event decoded so far."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def load_tables(path: str | Path) -> EventTables:
    """Read, decode and tabulate one trace file. Raises TraceError (one line, names the file) on bad input."""
    data, sha = read_trace_bytes(path)
    with _gc_paused():
        doc = decode_trace(data, path)
        size = len(data)
        del data
        return build_tables(doc, path=str(path), sha256=sha, decompressed_bytes=size)
