"""Result types of the attribution section of a breakdown (optional: absent in breakdowns written before it).

Versioned on its own (``Attribution.version``) so that it can grow without touching the rest of the schema.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

ATTRIBUTION_VERSION = "1"


class Method(StrEnum):
    """How a work item's module-view bucket was found, most specific first."""

    OP_STACK = "op_stack"  # a [[module]] rule named an enclosing CPU op (vllm::moe_forward, _C::rms_norm, ...)
    MODULE_TREE = "module_tree"  # the enclosing nn.Module calls (traces recorded with_stack)
    GRAPH_ALIGNMENT = "graph_alignment"  # a graph-replayed kernel aligned with its capture / eager run
    #: a graph-replayed kernel placed by the model's layer plan in the replay's structure; analysis.structural
    STRUCTURAL = "structural"
    #: no evidence of its own, but launched between attributed kernels: their layer, and their block where the
    #: model's structure makes it unambiguous (else its kernel-name bucket); analysis.bracket
    BRACKETED = "bracketed"
    KERNEL_NAME = "kernel_name"  # nothing above: the kernel view (what the kernel's name says)


@dataclass(frozen=True)
class LayerRow:
    """GPU time of one decoder layer in one phase (summed over the phase's steps)."""

    layer: int  # decoder layer index (the layer module's instance number)
    layer_type: str  # token mixer + feed-forward: "gdn+moe", "attention+moe", "attention+dense", ...
    time_us: float
    share_pct: float  # of the phase's GPU busy time
    by_bucket_us: dict[str, float]  # module-view bucket -> time


@dataclass(frozen=True)
class PhaseAttribution:
    phase: str
    coverage_us: dict[str, float]  # Method -> GPU time whose module view that method gave
    coverage_pct: dict[str, float]  # same, percent of the phase's GPU busy time (sums to 100)
    layers: list[LayerRow]  # empty without a module tree
    outside_layers_us: float  # GPU time in no decoder layer (embedding, logits, sampler, host-side work)


@dataclass(frozen=True)
class InferredPhase:
    """A phase phaseprof inferred for a step without token-count markers, with what it saw."""

    step: int
    phase: str
    evidence: str


@dataclass(frozen=True)
class Attribution:
    """How module views were attributed, per-layer times, and inferred phases and mode."""

    version: str
    module_calls: int  # nn.Module forward calls in the trace (0: recorded without stacks)
    module_classes: list[str]
    graph_alignment: str  # what graph-replay alignment did, one sentence
    #: kernels graph-replayed / to align (replayed or without module evidence) / paired with a reference kernel /
    #: replayed and paired / that took a module from the reference; bracketed with a neighbouring block's module /
    #: with the layer only / attributed otherwise and given only the layer ({} when nothing was aligned); without a
    #: reference, the layer plan's ``structural_with_module`` / ``structural_layer_only`` instead; with both,
    #: ``structural_agreement_bp``: the plan's (layer, module) agreement with the alignment, basis points of GPU time
    alignment_counts: dict[str, int]
    phases: list[PhaseAttribution]
    mode: str  # "eager" | "compiled" | "piecewise graphs" | "full graphs" | "full and piecewise graphs" | "cpu"
    mode_evidence: str
    inferred_phases: list[InferredPhase] = field(default_factory=list)
    empty_steps_dropped: int = 0
