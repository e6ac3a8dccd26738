"""The breakdown phaseprof produces: frozen dataclasses, serialised as versioned JSON (``report/json_io.py``
writes and reads it and derives its JSON Schema, ``json_schema()``; the version is ``defaults.SCHEMA_VERSION``).

All times are microseconds (``_us``), shares are percent of GPU busy time (``_pct``) unless named otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

from phaseprof.analysis.attribution_types import Attribution
from phaseprof.analysis.profiler_types import ProfilerCost
from phaseprof.analysis.sol_results import SolSection
from phaseprof.analysis.verdict_types import Verdicts
from phaseprof.records import RunRecord


@dataclass(frozen=True)
class Stats:
    """Distribution of one per-step number across the steps of a phase."""

    mean: float
    p50: float
    p90: float
    min: float
    max: float


@dataclass(frozen=True)
class BucketTime:
    """Time attributed to one bucket. Overlapping kernels split their common time equally, so the bucket
    times of a step or phase add up exactly to its GPU busy time."""

    bucket: str
    time_us: float
    share_pct: float
    count: int


@dataclass(frozen=True)
class KernelStat:
    name: str
    bucket: str  # kernel view
    module: str  # module view (most common for this name)
    count: int
    time_us: float  # attributed (exclusive) time
    share_pct: float


@dataclass(frozen=True)
class IdleSplit:
    """Why the GPU was idle inside a step's wall time (sums to ``gpu_idle_us``).

    - ``launch_overhead_us``: GPU waiting for work that had not been launched yet, while the host thread
      was inside a launch API call (``cudaLaunchKernel``, ``cudaGraphLaunch``, ...).
    - ``host_work_us``: GPU waiting for work not launched yet while the host did other things (Python,
      scheduling, framework dispatch, input preparation, syncs). Together with launch overhead: GPU starved.
    - ``other_us``: work had been launched but not started (queue/dependency latency), or after the last
      kernel of the step.
    """

    launch_overhead_us: float
    host_work_us: float
    other_us: float


@dataclass(frozen=True)
class LaunchCounts:
    total: int  # host calls that put work on the GPU
    by_api: dict[str, int]
    graph_launches: int


@dataclass(frozen=True)
class AllocCounts:
    """Allocator events (``[memory]``, what ``torch.empty`` produces) vs real device mallocs (API calls)."""

    allocations: int
    frees: int
    alloc_bytes: int
    free_bytes: int
    gpu_allocations: int
    cpu_allocations: int
    device_mallocs: int  # cudaMalloc/cuMemAlloc/hipMalloc... calls
    device_frees: int


@dataclass(frozen=True)
class StepRow:
    index: int
    label: str
    phase: str
    context_tokens: int | None
    generation_tokens: int | None
    start_us: float  # from trace origin
    wall_us: float  # step start to the end of its last GPU activity (or host end, whichever is later)
    gpu_busy_us: float  # the step's share of GPU busy: union of kernel/memcpy/memset time, overlaps split evenly
    gpu_idle_us: float  # time in the step's wall window when no GPU activity of any step ran
    busy_pct: float
    idle: IdleSplit
    host_sync_us: float  # time the host spent in synchronize calls during the step
    kernels: int
    memcpy_count: int
    memcpy_bytes: int
    memset_count: int
    memset_bytes: int
    launches: LaunchCounts
    memory: AllocCounts
    kernel_view_us: dict[str, float]
    module_view_us: dict[str, float]
    gpu_busy_other_steps_us: float = 0.0  # neighbouring steps' GPU work inside this step's window (async overlap)


@dataclass(frozen=True)
class PhaseSummary:
    phase: str
    steps: int
    wall_us: float
    gpu_busy_us: float
    gpu_idle_us: float
    idle: IdleSplit
    kernels: int
    kernel_view: list[BucketTime]
    module_view: list[BucketTime]
    top_kernels: dict[str, list[KernelStat]]  # per kernel-view bucket
    per_step: dict[str, Stats]  # wall_us, gpu_busy_us, busy_pct, kernels, launches, allocations, ...


@dataclass(frozen=True)
class TraceInfo:
    path: str
    sha256: str
    decompressed_bytes: int
    event_count: int
    platform: str
    device: str  # "gpu" or "cpu" (CPU-only trace: CPU ops are the work items)
    gpu_name: str | None
    gpu_properties: dict[str, Any]
    versions: dict[str, str]
    distributed: dict[str, Any]


@dataclass(frozen=True)
class ToolInfo:
    """What wrote the breakdown: ``reader`` is the trace reader that made its tables (schema 1.5): ``native`` (the
    Rust scanner shipped in the wheel) or ``python`` (the pure-Python reference); both give the same numbers.
    None in breakdowns written before 1.5."""

    name: str
    version: str
    reader: Literal["native", "python"] | None = None


@dataclass(frozen=True)
class Breakdown:
    schema_version: str
    tool: ToolInfo
    trace: TraceInfo
    step_detection: dict[str, str]  # method, detail
    totals: dict[str, float]  # whole-trace GPU busy etc. for cross-checks
    phases: list[PhaseSummary]
    steps: list[StepRow]
    unknown_kernels: list[KernelStat]
    notes: list[str] = field(default_factory=list)
    # What the capture recorded: the trace's embedded facts, or a run directory's whole run.json where a reader
    # has one (diff, dashboard). Written to JSON as the embedded subset (``RunRecord.embedded``), {} when None.
    capture: RunRecord | None = None
    sol: SolSection | None = None  # speed of light (schema 1.1): needs a model config, see phaseprof.sol
    attribution: Attribution | None = None  # module/layer attribution, coverage, inferred phases and mode
    verdicts: Verdicts | None = None  # one line per phase and noise warnings (schema 1.2, analysis.verdict)
    # what the profiler recorded and its host cost per phase, from the trace (optional, analysis.profiler_cost)
    profiler: ProfilerCost | None = None

    def naming_trace(self, path: str) -> Breakdown:
        """This breakdown with ``trace.path`` = ``path`` (e.g. where a run directory's copy lives once renamed)."""
        return replace(self, trace=replace(self.trace, path=path))
