"""The breakdown's optional ``sol`` section: work, achieved throughput and speed-of-light floors.

Definitions used by every number here:
- work is the model's (``phaseprof.sol.work``), not counted from kernels; FLOPs count a multiply-add as 2.
- a component's floor is ``max(flops / peak FLOP/s, bytes / peak bytes/s)`` on the ceiling used; a bucket's
  floor is the sum of its components' floors, a step's the sum of its buckets' (kernels run one after
  another, each limited by its own resource).
- ``pct_of_light = 100 · floor / measured time``: 100% would be the GPU's peak on the binding resource.
- achieved TFLOP/s and TB/s are work over the bucket's measured (kernel-view) GPU time.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class SolCeiling:
    """The ceiling used: ``kind`` "spec" (datasheet) or "measured"; ``precision`` picks the FLOP/s peak."""

    gpu: str
    kind: str
    source: str
    precision: str
    tflops: float
    hbm_tbps: float
    ridge_flop_per_byte: float


@dataclass(frozen=True)
class SolBucket:
    """One kernel-view bucket of one phase, summed over the phase's steps."""

    bucket: str
    flops: float
    bytes: float
    time_us: float  # measured: the bucket's kernel-view time (same as the phase table)
    intensity_flop_per_byte: float
    bound: str  # "compute" | "memory": the resource behind most of the floor
    achieved_tflops: float
    achieved_tbps: float
    floor_us: float
    pct_of_light: float | None  # None when the bucket took no measured time
    components: dict[str, float] = field(default_factory=dict)  # component -> floor_us


@dataclass(frozen=True)
class SolPhase:
    phase: str
    steps: int
    floor_us: float  # sum of the steps' floors
    gpu_busy_us: float
    wall_us: float
    pct_of_light_busy: float | None  # floor / GPU busy
    pct_of_light_wall: float | None  # floor / wall (what a user waits for)
    buckets: list[SolBucket]


@dataclass(frozen=True)
class SolStep:
    index: int
    phase: str
    tokens: int
    flops: float
    bytes: float
    floor_us: float
    gpu_busy_us: float
    wall_us: float
    pct_of_light_wall: float | None


@dataclass(frozen=True)
class SolSection:
    """``status``: "ok", or why there are no SOL numbers ("needs --model-config", "no ceilings for <GPU>")."""

    status: str
    model: str | None = None
    model_source: str | None = None
    ceiling: SolCeiling | None = None
    phases: list[SolPhase] = field(default_factory=list)
    steps: list[SolStep] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def phase(self, name: str) -> SolPhase | None:
        return next((p for p in self.phases if p.phase == name), None)
