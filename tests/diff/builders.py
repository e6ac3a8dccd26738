"""Inline Breakdowns for diff tests: a phase described in one call, the expected diff beside it.

Synthetic numbers pin down the diff's arithmetic and matching rules; facts about real kernels are tested on
the recorded traces (test_real_pairs.py).
"""

from __future__ import annotations

from pathlib import Path

from phaseprof.analysis.results import (AllocCounts, Breakdown, BucketTime, IdleSplit, KernelStat, LaunchCounts,
                                        PhaseSummary, Stats, StepRow, ToolInfo, TraceInfo)
from phaseprof.records import RunRecord

REPO = Path(__file__).resolve().parents[2]
PUBLIC = REPO.parent / "shared/traces/public"
PUBLIC_CUT = REPO / "traces/public-cut"


def stats(v: float) -> Stats:
    return Stats(v, v, v, v, v)


def K(name: str, bucket: str, count: int, time_us: float, module: str | None = None) -> KernelStat:
    """A kernel over the whole phase: ``count`` calls, ``time_us`` attributed time."""
    return KernelStat(name, bucket, module or bucket, count, time_us, 0.0)


def phase(name: str = "decode", *, steps: int = 2, kernels: list[KernelStat] = (), launches: int = 100,
          graph: int = 0, by_api: dict[str, int] | None = None, allocations: int = 0, mallocs: int = 0,
          idle_us: float = 0.0, tokens: tuple[int, int] = (0, 8)) -> tuple[PhaseSummary, list[StepRow]]:
    """A phase whose buckets are the sums of ``kernels``; per-step numbers are the totals / steps (every
    step alike). ``launches``, ``allocations`` and ``mallocs`` are per step."""
    busy = sum(k.time_us for k in kernels)
    by_bucket: dict[str, list[float]] = {}
    by_module: dict[str, list[float]] = {}
    for k in kernels:
        by_bucket.setdefault(k.bucket, [0.0, 0])
        by_bucket[k.bucket][0] += k.time_us
        by_bucket[k.bucket][1] += k.count
        by_module.setdefault(k.module, [0.0, 0])
        by_module[k.module][0] += k.time_us
        by_module[k.module][1] += k.count

    def view(d: dict[str, list[float]]) -> list[BucketTime]:
        return [BucketTime(b, t, 100.0 * t / busy if busy else 0.0, int(n))
                for b, (t, n) in sorted(d.items(), key=lambda x: -x[1][0])]

    top: dict[str, list[KernelStat]] = {}
    for k in sorted(kernels, key=lambda k: -k.time_us):
        top.setdefault(k.bucket, []).append(k)
    n_kernels = sum(k.count for k in kernels)
    apis = by_api or {("cudaGraphLaunch" if graph else "cudaLaunchKernel"): launches}
    rows = [StepRow(
        index=i, label=f"step {i}", phase=name, context_tokens=tokens[0], generation_tokens=tokens[1],
        start_us=1000.0 * i, wall_us=(busy + idle_us) / steps, gpu_busy_us=busy / steps,
        gpu_idle_us=idle_us / steps, busy_pct=100.0 * busy / (busy + idle_us) if busy else 0.0,
        idle=IdleSplit(idle_us / steps, 0.0, 0.0), host_sync_us=0.0, kernels=n_kernels // steps, memcpy_count=0,
        memcpy_bytes=0, memset_count=0, memset_bytes=0,
        launches=LaunchCounts(launches, dict(apis), graph),
        memory=AllocCounts(allocations, 0, 0, 0, allocations, 0, mallocs, 0), kernel_view_us={},
        module_view_us={}) for i in range(steps)]
    per_step = {"wall_us": (busy + idle_us) / steps, "gpu_busy_us": busy / steps, "gpu_idle_us": idle_us / steps,
                "busy_pct": 100.0 * busy / (busy + idle_us) if busy else 0.0,
                "launch_overhead_us": idle_us / steps, "host_work_us": 0.0, "kernels": n_kernels / steps,
                "launch_calls": launches, "graph_launches": graph, "allocations": allocations,
                "gpu_allocations": allocations, "device_mallocs": mallocs, "memcpy_count": 0}
    summary = PhaseSummary(
        phase=name, steps=steps, wall_us=busy + idle_us, gpu_busy_us=busy, gpu_idle_us=idle_us,
        idle=IdleSplit(idle_us, 0.0, 0.0), kernels=n_kernels, kernel_view=view(by_bucket),
        module_view=view(by_module), top_kernels=top, per_step={k: stats(float(v)) for k, v in per_step.items()})
    return summary, rows


def breakdown(*phases: tuple[PhaseSummary, list[StepRow]], gpu: str = "NVIDIA H100 80GB HBM3",
              platform: str = "cuda", capture: RunRecord | None = None, world_size: int = 1,
              path: str = "a.pt.trace.json.gz") -> Breakdown:
    rows = [r for _, rs in phases for r in rs]
    return Breakdown(
        schema_version="1.0", tool=ToolInfo(name="phaseprof", version="test"),
        trace=TraceInfo(path=path, sha256="0" * 64, decompressed_bytes=1, event_count=1, platform=platform,
                        device="gpu", gpu_name=gpu, gpu_properties={}, versions={},
                        distributed={"world_size": world_size}),
        step_detection={"method": "markers:phaseprof", "detail": "test"}, totals={},
        phases=[p for p, _ in phases], steps=rows, unknown_kernels=[], notes=[], capture=capture)
