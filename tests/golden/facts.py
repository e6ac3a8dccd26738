"""Helpers of the golden tests: the key facts of a Breakdown, their comparison, and totals recomputed from
the raw events with nothing but gzip + json (no phaseprof code), to check phaseprof's numbers against."""

from __future__ import annotations

import gzip
import json
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from phaseprof.analysis.results import Breakdown

REPO = Path(__file__).resolve().parents[2]
PUBLIC_CUT_DIR = REPO / "traces" / "public-cut"
EXPECTED_DIR = Path(__file__).resolve().parent / "expected"
#: Buckets listed per phase in the golden file (the rest are summed in the phase's busy time anyway).
TOP_BUCKETS = 6
#: Golden numbers are compared with this tolerance: absolute (us, %, counts are exact) or relative.
ABS_TOL = 0.01
REL_TOL = 1e-6

GPU_CATS = {"kernel": "kernel", "Kernel": "kernel", "gpu_memcpy": "memcpy", "Memcpy": "memcpy",
            "gpu_memset": "memset", "Memset": "memset"}
RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "Runtime"}


def fixture_files() -> list[Path]:
    """The committed cut-down traces, sorted."""
    return sorted(PUBLIC_CUT_DIR.glob("*.json.gz"))


def expected_path(trace: Path) -> Path:
    return EXPECTED_DIR / (trace.name.split(".json")[0] + ".json")


def _r(x: float, nd: int = 3) -> float:
    return round(float(x), nd)


def key_facts(bd: Breakdown) -> dict[str, Any]:
    """What a golden file pins down: steps and how they were found, per-phase busy time, kernel counts, top
    buckets (both views) with shares, and per-step kernel and launch counts by API."""
    return {
        "trace": {"platform": bd.trace.platform, "device": bd.trace.device, "gpu_name": bd.trace.gpu_name,
                  "event_count": bd.trace.event_count},
        "step_detection": bd.step_detection["method"],
        "steps": len(bd.steps),
        "totals": {"gpu_busy_us": _r(bd.totals["gpu_busy_us"]), "kernels": int(bd.totals["kernels"]),
                   "gpu_activities": int(bd.totals["gpu_activities"])},
        "phases": [{
            "phase": ph.phase, "steps": ph.steps, "gpu_busy_us": _r(ph.gpu_busy_us), "kernels": ph.kernels,
            "kernel_view": [{"bucket": b.bucket, "share_pct": _r(b.share_pct, 2), "count": b.count}
                            for b in ph.kernel_view[:TOP_BUCKETS]],
            "module_view": [{"bucket": b.bucket, "share_pct": _r(b.share_pct, 2)}
                            for b in ph.module_view[:TOP_BUCKETS]],
        } for ph in bd.phases],
        "per_step": [{"phase": s.phase, "kernels": s.kernels, "gpu_busy_us": _r(s.gpu_busy_us),
                      "launches": dict(sorted(s.launches.by_api.items())), "graph_launches": s.launches.graph_launches}
                     for s in bd.steps],
        "unknown_kernel_names": len(bd.unknown_kernels),
    }


def compare_facts(expected: Any, actual: Any, where: str = "$") -> list[str]:
    """Differences between two fact trees, one line each (numbers within ABS_TOL or REL_TOL are equal)."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        out = []
        for k in sorted(set(expected) | set(actual), key=str):
            if k not in actual:
                out.append(f"{where}.{k}: missing (expected {expected[k]!r})")
            elif k not in expected:
                out.append(f"{where}.{k}: unexpected {actual[k]!r}")
            else:
                out += compare_facts(expected[k], actual[k], f"{where}.{k}")
        return out
    if isinstance(expected, list) and isinstance(actual, list):
        out = [f"{where}: {len(actual)} entries, expected {len(expected)}"] if len(expected) != len(actual) else []
        for i, (e, a) in enumerate(zip(expected, actual)):
            out += compare_facts(e, a, f"{where}[{i}]")
        return out
    if isinstance(expected, float) or isinstance(actual, float):
        if isinstance(expected, (int, float)) and isinstance(actual, (int, float)) and \
                math.isclose(expected, actual, rel_tol=REL_TOL, abs_tol=ABS_TOL):
            return []
    elif expected == actual:
        return []
    return [f"{where}: {actual!r}, expected {expected!r}"]


# --- totals straight from the raw events ----------------------------------------------------------------------

@dataclass(frozen=True)
class RawTotals:
    """Simple totals read with gzip + json only. ``gpu_busy_us`` = union of kernel, memcpy and memset intervals
    (overlapping streams count once), computed on integer nanoseconds from the first GPU activity."""

    gpu_busy_us: float
    counts: Counter  # "kernel" / "memcpy" / "memset" -> number of activities
    runtime_calls: Counter  # runtime/driver API name -> number of calls


def raw_events(path: Path) -> list[dict[str, Any]]:
    raw = path.read_bytes()
    doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    return doc["traceEvents"] if isinstance(doc, dict) else doc


def raw_totals(path: Path) -> RawTotals:
    events = raw_events(path)
    gpu = [e for e in events if e.get("ph") == "X" and e.get("cat") in GPU_CATS and "ts" in e]
    counts = Counter(GPU_CATS[e["cat"]] for e in gpu)
    runtime = Counter(e["name"] for e in events if e.get("ph") == "X" and e.get("cat") in RUNTIME_CATS)
    busy_ns = 0
    if gpu:
        t0 = min(e["ts"] for e in gpu)
        # Differences of nearby doubles are exact, so epoch-us timestamps keep their sub-us part here.
        spans = sorted((round((e["ts"] - t0) * 1000), round((e["ts"] - t0) * 1000) + round((e.get("dur") or 0) * 1000))
                       for e in gpu)
        cur_s, cur_e = spans[0]
        for s, e in spans[1:]:
            if s > cur_e:
                busy_ns += cur_e - cur_s
                cur_s, cur_e = s, e
            else:
                cur_e = max(cur_e, e)
        busy_ns += cur_e - cur_s
    return RawTotals(gpu_busy_us=busy_ns / 1000.0, counts=counts, runtime_calls=runtime)


def dump_facts(obj: Any, indent: int = 0) -> str:
    """JSON with one line per leaf object (a dict or list of plain values), so golden diffs stay readable."""
    pad = "  " * (indent + 1)
    if isinstance(obj, dict) and any(isinstance(v, (dict, list)) for v in obj.values()):
        items = [f"{pad}{json.dumps(k)}: {dump_facts(v, indent + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + "  " * indent + "}"
    if isinstance(obj, list) and any(isinstance(v, (dict, list)) for v in obj):
        items = [f"{pad}{dump_facts(v, indent + 1)}" for v in obj]
        return "[\n" + ",\n".join(items) + "\n" + "  " * indent + "]"
    return json.dumps(obj, separators=(", ", ": "))


def load_expected(trace: Path) -> dict[str, Any] | None:
    p = expected_path(trace)
    return json.loads(p.read_text()) if p.exists() else None
