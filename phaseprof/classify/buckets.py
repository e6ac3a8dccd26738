"""The buckets every kernel (or CPU op, on CPU-only traces) is assigned to.

The same buckets serve both views: the kernel view (what a kernel is, from its name) and the module view
(which model component it ran for, from the enclosing CPU op stack). Rules: ``rules/default.toml``; ``mlp`` is
module-view only (``rules/layers.toml``).
"""

from __future__ import annotations

from enum import StrEnum


class Bucket(StrEnum):
    """What a kernel is (kernel view) or which model component it ran for (module view)."""

    MOE = "moe"
    GDN = "gdn"
    ATTENTION = "attention"
    GEMM = "gemm"
    NORM = "norm"
    ELEMENTWISE = "elementwise"  # elementwise / activation / rope / copies done by kernels
    QUANT = "quant"  # activation quantise / dequantise / scale (amax) kernels of FP8/INT8/FP4 models
    MEMORY = "memory"  # memcpy / memset activities
    COMMUNICATION = "communication"
    SAMPLING = "sampling"
    # module view only: a dense feed-forward (gate_up GEMM, activation, down GEMM); no kernel is named one, and a
    # MoE block's shared expert stays moe (rules/layers.toml [layer_type], analysis/modules.py)
    MLP = "mlp"
    OTHER = "other"  # known kernels that fit no bucket above
    UNKNOWN = "unknown"  # matched no rule at all: always listed with its time
