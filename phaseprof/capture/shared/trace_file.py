"""The trace file a capture writes, on either path: the exported (in-process) or collected (server) Chrome trace
made what phaseprof and HTA expect, trimmed to a size limit, gzipped (``finalize_trace`` -> ``TraceFile``)."""

from __future__ import annotations

import gzip
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from phaseprof.capture.shared.trim import drop_deepest_levels, drop_loops
from phaseprof.trace.markers import PHASEPROF_STEP_PREFIX
from phaseprof.trace.tables import MODULE_PREFIX, MODULE_SCOPE_CATEGORIES

DEFAULT_MAX_TRACE_BYTES = 5 * 1024 * 1024  # gzipped; the repository's limit for committed traces
DEFAULT_DISTRIBUTED_INFO = {"backend": "none", "rank": 0, "world_size": 1}
#: Steps kept (when there are as many) before the module tree is dropped to meet the size limit.
MIN_STEPS_WITH_TREE = 4


@dataclass(frozen=True)
class TraceFile:
    """What was written: gzipped size, event count, step markers kept, and what trimming dropped (in order)."""

    path: Path
    gz_bytes: int
    events: int
    markers: int
    renamed_markers: dict[str, str]
    dropped: tuple[str, ...] = field(default_factory=tuple)
    max_bytes: int | None = None  # the size limit it was trimmed to (gzipped bytes)

    def to_dict(self) -> dict[str, object]:
        return {"file": self.path.name, "gz_bytes": self.gz_bytes, "events": self.events, "markers": self.markers,
                "renamed_markers": self.renamed_markers, "dropped": list(self.dropped), "max_bytes": self.max_bytes}


def is_module_scope(e: dict[str, Any]) -> bool:
    """An ``nn.Module: Class_N`` scope: a Python-tracer module frame or a hook's scope (``module_scopes``)."""
    return e.get("cat") in MODULE_SCOPE_CATEGORIES and str(e.get("name", "")).startswith(MODULE_PREFIX)


def _is_marker(e: dict[str, Any]) -> bool:
    return e.get("ph") == "X" and str(e.get("name", "")).startswith(PHASEPROF_STEP_PREFIX) and \
        e.get("cat") in ("user_annotation", "cpu_op", None)


def _window(events: list[dict[str, Any]], markers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Events overlapping [first marker start, last marker end]; metadata (ph M) always kept."""
    lo = min(float(m["ts"]) for m in markers)
    hi = max(float(m["ts"]) + float(m.get("dur", 0)) for m in markers)
    keep = []
    for e in events:
        if "ts" not in e or e.get("ph") == "M":
            keep.append(e)
            continue
        ts = float(e["ts"])
        if ts <= hi and ts + float(e.get("dur", 0) or 0) >= lo:
            keep.append(e)
    return keep


def _encode(doc: dict[str, Any]) -> bytes:
    # Indented, so keys are followed by ": " as in torch's own export: HTA 0.5.0 finds the rank with the regex
    # '"rank":\s+(\d+)' and would put every compactly written rank on rank 0.
    return gzip.compress(orjson.dumps(doc, option=orjson.OPT_INDENT_2), compresslevel=6, mtime=0)


def finalize_trace(raw: Path, dest: Path, *, corrections: dict[str, str] | None = None,
                   metadata: dict[str, Any] | None = None, max_bytes: int = DEFAULT_MAX_TRACE_BYTES) -> TraceFile:
    """Make the exported trace what phaseprof and HTA expect, then gzip it to ``dest`` (≤ ``max_bytes``).

    1. ``distributedInfo`` added when absent (HTA needs it); 2. markers whose predicted token counts were wrong
    renamed to what the scheduler really ran; 3. events outside the profiled steps dropped; 4. if still too big:
    drop ``python_function`` events that are not module frames, then CPU ops inside loops, then memory events,
    then the deepest CPU-op levels (``phaseprof.capture.shared.trim``), then the last steps down to
    ``MIN_STEPS_WITH_TREE``, then the module scopes, then more steps, until it fits. Markers, launches and kernels stay;
    ``TraceFile.dropped`` says what went (run.json ``trace.dropped``).
    ``metadata`` is embedded as the top-level ``phaseprof`` key (what was captured, how; ``analyze`` reads it).
    """
    doc = orjson.loads(raw.read_bytes())
    doc.setdefault("distributedInfo", dict(DEFAULT_DISTRIBUTED_INFO))
    if metadata:
        doc["phaseprof"] = metadata
        if metadata.get("vllm_version"):
            doc.setdefault("vllm_version", metadata["vllm_version"])
    events: list[dict[str, Any]] = doc.get("traceEvents", [])
    corrections = dict(corrections or {})
    if corrections:
        for e in events:
            name = e.get("name")
            if name in corrections:
                e["name"] = corrections[name]
    markers = [e for e in events if _is_marker(e)]
    dropped: list[str] = []
    if markers:
        before = len(events)
        events = _window(events, markers)
        if len(events) < before:
            dropped.append(f"{before - len(events)} events outside the profiled steps")
    doc["traceEvents"] = events
    blob = _encode(doc)

    def too_big(evs: list[dict[str, Any]]) -> bool:
        return len(_encode({**doc, "traceEvents": evs})) > max_bytes

    def without(label: str, keep: Any) -> Any:
        def stage(evs: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
            out = [e for e in evs if keep(e)]
            return out, [f"{len(evs) - len(out)} {label}"] if len(out) < len(evs) else []
        return stage

    def loops(evs: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
        out, note = drop_loops(evs)
        return out, [note] if note else []

    stages = [
        # Python frames first, but the module scopes last of all: they are the module tree (analysis/modules.py),
        # a few hundred events per step where the CPU ops below them are thousands.
        without("python_function events (not nn.Module)",
                lambda e: e.get("cat") != "python_function" or is_module_scope(e)),
        loops,
        without("memory events", lambda e: not (e.get("name") == "[memory]" or e.get("cat") == "cpu_instant_event")),
        lambda evs: drop_deepest_levels(evs, too_big=too_big),
    ]
    for stage in stages:
        if len(blob) <= max_bytes:
            break
        events, notes = stage(events)
        if notes:
            dropped += notes
            doc["traceEvents"] = events
            blob = _encode(doc)
    markers = sorted((e for e in events if _is_marker(e)), key=lambda e: float(e["ts"]))

    def fewer_steps(down_to: int) -> None:
        nonlocal events, markers, blob
        while len(blob) > max_bytes and len(markers) > down_to:
            markers = markers[: max(down_to, len(markers) // 2)]
            events = _window(events, markers)
            doc["traceEvents"] = events
            blob = _encode(doc)
            dropped.append(f"kept only the first {len(markers)} steps")

    # Fewer steps before no module tree: a few steps with their modules and layers say more than many without
    # (an eager H200 decode capture lost its whole tree to the size limit while 33 steps were kept).
    fewer_steps(MIN_STEPS_WITH_TREE)
    if len(blob) > max_bytes:
        events, notes = without("nn.Module scopes (the module tree)", lambda e: not is_module_scope(e))(events)
        if notes:
            dropped += notes
            doc["traceEvents"] = events
            blob = _encode(doc)
    fewer_steps(1)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(blob)
    n_markers = sum(1 for e in events if _is_marker(e))
    return TraceFile(path=dest, gz_bytes=len(blob), events=len(events), markers=n_markers,
                     renamed_markers=corrections, dropped=tuple(dropped), max_bytes=max_bytes)
