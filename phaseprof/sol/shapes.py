"""Cross-check the work model's GEMMs against the shapes a trace recorded (``record_shapes``: ``Input Dims``).

Each outermost ``aten::linear`` / ``mm`` / ``addmm`` / ``matmul`` / ``bmm`` CPU op inside a step gives FLOPs
``2·M·K·N`` from its shapes. Its weight shape ``(K, N)`` names the model component it belongs to (tensor
parallelism splits N of column-parallel and K of row-parallel layers by the world size); the model's FLOPs for
that call use the step's token count as M (sequences for lm_head). A difference means padding (CUDA-graph
batch sizes), a different config, or a component the model lacks. Ops whose weights match no component are
counted as unmatched (attention matmuls, MoE expert GEMMs that run as custom ops are not aten GEMMs at all).
"""

from __future__ import annotations

import gzip
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from phaseprof.errors import TraceError
from phaseprof.sol.model import SolModel
from phaseprof.sol.work import Component
from phaseprof.trace.markers import parse_step_marker

GEMM_OPS = ("aten::linear", "aten::mm", "aten::addmm", "aten::matmul", "aten::bmm")


@dataclass(frozen=True)
class ShapeRow:
    component: str
    calls: int
    shape_flops: float  # from the recorded Input Dims
    model_flops: float  # the work model's FLOPs for the same calls
    diff_pct: float  # 100 · (shape − model) / model


@dataclass(frozen=True)
class ShapeCheck:
    rows: list[ShapeRow]
    unmatched_calls: int
    unmatched_flops: float
    steps: int  # steps with token counts whose GEMMs were read


def _mkn(name: str, dims: list[Any]) -> tuple[float, int, int] | None:
    """(rows M, K, N) of one GEMM op from its Input Dims; None when the shapes are not a plain GEMM."""
    try:
        if name == "aten::linear":
            x, w = dims[0], dims[1]
            return float(math.prod(x[:-1])), int(w[1]), int(w[0])
        if name == "aten::addmm":
            a, b = dims[1], dims[2]
        elif name == "aten::bmm":
            a, b = dims[0], dims[1]
            return float(a[0] * a[1]), int(a[2]), int(b[2])
        else:
            a, b = dims[0], dims[1]
        if len(b) != 2:
            return None
        return float(math.prod(a[:-1])), int(a[-1]), int(b[1])
    except (IndexError, TypeError, ValueError):
        return None


def weight_shapes(m: SolModel, tp: int = 1) -> dict[tuple[int, int], Component]:
    """(K, N) of every projection weight, whole and split ``tp`` ways (column-parallel: N/tp, row: K/tp)."""
    h = m.hidden
    col: list[tuple[int, int, Component]] = []
    row: list[tuple[int, int, Component]] = []
    rep: list[tuple[int, int, Component]] = []
    if m.moe_layers:
        rep.append((h, m.num_experts, Component.ROUTER))
        if m.shared_intermediate:
            col.append((h, 2 * m.shared_intermediate, Component.SHARED_EXPERT))
            row.append((m.shared_intermediate, h, Component.SHARED_EXPERT))
            rep.append((h, 1, Component.SHARED_EXPERT))
    if m.dense_layers:
        col.append((h, 2 * m.intermediate_size, Component.DENSE_MLP))
        row.append((m.intermediate_size, h, Component.DENSE_MLP))
    if m.attention_layers and m.mla is None:
        q_out = m.heads * m.head_dim * (2 if m.attn_output_gate else 1)
        col.append((h, q_out + 2 * m.kv_heads * m.head_dim, Component.ATTN_PROJ))
        row.append((m.heads * m.head_dim, h, Component.ATTN_PROJ))
    if m.gdn is not None and m.gdn_layers:
        g = m.gdn
        col.append((h, 2 * g.num_key_heads * g.key_head_dim + 2 * g.num_value_heads * g.value_head_dim,
                    Component.GDN_PROJ))
        col.append((h, 2 * g.num_value_heads, Component.GDN_PROJ))
        row.append((g.num_value_heads * g.value_head_dim, h, Component.GDN_PROJ))
    col.append((h, m.vocab, Component.LM_HEAD))
    out: dict[tuple[int, int], Component] = {}
    for split in sorted({1, max(tp, 1)}, reverse=True):
        for k, n, c in col:
            out.setdefault((k, n // split), c)
        for k, n, c in row:
            out.setdefault((k // split, n), c)
    for k, n, c in rep:
        out.setdefault((k, n), c)
    return out


def _events(path: Path) -> list[dict[str, Any]]:
    try:
        raw = gzip.open(path).read() if path.suffix == ".gz" else path.read_bytes()
        doc = orjson.loads(raw)
    except (OSError, orjson.JSONDecodeError) as e:
        raise TraceError(f"cannot read the trace's shapes ({e})", path=path) from None
    ev = doc.get("traceEvents") if isinstance(doc, dict) else doc
    return [e for e in ev or [] if isinstance(e, dict) and e.get("ph") == "X"]


def check_shapes(path: str | Path, m: SolModel, *, tp: int = 1) -> ShapeCheck | None:
    """The cross-check for one trace, or None when it recorded no GEMM shapes inside marked steps."""
    ev = _events(Path(path))
    steps = []
    for e in ev:
        if e.get("cat") == "user_annotation":
            mk = parse_step_marker(str(e.get("name", "")))
            if mk is not None and mk.context_tokens is not None and mk.generation_tokens is not None:
                seqs = (mk.context_requests or 0) + (mk.generation_requests or 0)
                steps.append((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)),
                              mk.context_tokens + mk.generation_tokens, seqs))
    gemms = sorted((e for e in ev if e.get("cat") == "cpu_op" and e.get("name") in GEMM_OPS
                    and isinstance((e.get("args") or {}).get("Input Dims"), list)),
                   key=lambda e: (e.get("tid"), float(e["ts"]), -float(e.get("dur", 0))))
    if not steps or not gemms:
        return None
    shapes = weight_shapes(m, tp)
    acc: dict[str, list[float]] = {}
    unmatched, unmatched_flops = 0, 0.0
    outer_end: dict[Any, float] = {}
    for e in gemms:
        ts, end = float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))
        if ts < outer_end.get(e.get("tid"), -math.inf):
            continue  # inside an outer GEMM op (linear -> addmm): counted once
        outer_end[e.get("tid")] = end
        step = next((s for s in steps if s[0] <= ts < s[1]), None)
        mkn = _mkn(str(e["name"]), e["args"]["Input Dims"])
        if step is None or mkn is None:
            continue
        rows, k, n = mkn
        flops = 2.0 * rows * k * n
        comp = shapes.get((k, n))
        if comp is None:
            unmatched += 1
            unmatched_flops += flops
            continue
        tokens = step[3] if comp is Component.LM_HEAD else step[2]
        a = acc.setdefault(str(comp), [0, 0.0, 0.0])
        a[0] += 1
        a[1] += flops
        a[2] += 2.0 * tokens * k * n
    rows_out = [ShapeRow(c, int(v[0]), v[1], v[2], 100.0 * (v[1] - v[2]) / v[2] if v[2] else 0.0)
                for c, v in sorted(acc.items(), key=lambda kv: -kv[1][1])]
    return ShapeCheck(rows_out, unmatched, unmatched_flops, len(steps))
