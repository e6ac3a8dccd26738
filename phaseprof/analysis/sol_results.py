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
    assumed: list[str] = field(default_factory=list)  # floor inputs assumed, not measured (e.g. MoE routing)
    #: set when the bucket ran faster than its floor: the assumption that broke (an assumed input), or a
    #: "work model or ceiling" bug when every input was measured. Never left unset above 100% of light.
    beats_floor: str | None = None


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
    #: "measured" (the MoE floor read the experts the step really touched), "uniform (assumed)", None: no MoE
    routing: str | None = None
    moe_experts: list[int] | None = None  # measured: distinct experts per MoE layer


@dataclass(frozen=True)
class SolMoeLayer:
    """One MoE layer of one phase with measured routing, summed over the phase's steps.

    ``floor_us``: the layer's routed-experts floor with the experts it touched; ``balanced_floor_us``: the same
    tokens spread evenly (every expert ``tokens·k/E`` rows: ``min(E, tokens·k)`` experts read). With a measured
    ``time_us`` (the layer's MoE module time, from the module tree), ``balanced_us = time_us ·
    balanced_floor_us / floor_us`` (same efficiency) and ``imbalance_us = time_us − balanced_us``: what the
    routing's skew cost (negative: the skew saved time, fewer expert weights read)."""

    phase: str
    layer: int  # MoE layer, 0.. in the order the MoE layers run
    steps: int
    tokens: int
    distinct_experts: float  # mean over the steps
    max_tokens_per_expert: int  # over the steps
    max_over_mean: float  # hottest expert's load / balanced load (mean over the steps)
    gini: float  # mean over the steps
    hottest: list[int]  # of the phase's last step
    floor_us: float
    balanced_floor_us: float
    time_us: float | None = None
    balanced_us: float | None = None
    imbalance_us: float | None = None


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
    routing: str | None = None  # "measured (routing.npz)", "uniform (assumed)", None: no MoE
    moe_layers: list[SolMoeLayer] = field(default_factory=list)  # with measured routing only

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def phase(self, name: str) -> SolPhase | None:
        return next((p for p in self.phases if p.phase == name), None)
