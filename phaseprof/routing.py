"""MoE routing measured during a capture: which experts each token chose in each MoE layer, per profiled step.

Files (written by ``capture.inprocess.routing_hook``, read here only):
- ``routing.npz`` in the run directory: ``steps`` (int32, the profiled steps' indices, in order), ``tokens``
  (int32, tokens per step), ``counts`` (int32, steps × MoE layers × experts: tokens routed to each expert) and,
  when the ids are small enough to keep (``MAX_IDS_KEPT`` over all steps), ``ids_<step>`` (uint8 up to 256
  experts, else int16; MoE layers × tokens × top-k: the expert ids each token chose, in token order).
- run.json's ``routing`` key: a ``RoutingRecord`` naming that file and how it was recorded.

Per step and layer the speed of light (``sol.imbalance``) reads distinct experts touched, tokens per expert (max,
mean over all experts = the balanced load ``tokens·k/E``, ``gini`` over all experts: 0 = every expert the same
load, → 1 = one expert takes all) and the ``hottest`` experts. Layers are numbered 0.. in the order the MoE layers ran (the model's MoE layers).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import msgspec
import numpy as np

from phaseprof.errors import PhaseprofError
from phaseprof.records import RunDir

ROUTING_FILE = "routing.npz"
#: Raw ids are kept while all steps' ids number at most this many (layers × tokens × top-k summed; ~0.5 MB as
#: uint8): a 128-token prefill or a short batch-1 decode of a 40-layer top-8 model; counts are always kept.
MAX_IDS_KEPT = 500_000
#: Experts listed as the hottest of a layer.
HOTTEST = 4


class RoutingRecord(msgspec.Struct, frozen=True, kw_only=True):
    """run.json ``routing``: where the routing is, how it was recorded and what it covers."""

    file: str | None = ROUTING_FILE  # None: nothing recorded (``why_not`` says why)
    method: str = ""  # how the ids were read, e.g. "forward hook on each MoE layer's router (gate): top-k ..."
    num_experts: int = 0
    top_k: int = 0
    moe_layers: int = 0
    steps: list[int] = msgspec.field(default_factory=list)  # profiled step indices recorded, in order
    tokens: list[int] = msgspec.field(default_factory=list)  # tokens per recorded step
    ids_kept: bool = False  # the raw ids are in the file (else counts only)
    profiled_only: bool = True  # recorded while the profiler ran, never during the timed runs
    why_not: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return msgspec.to_builtins(self)

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any], *, source: str = "") -> RoutingRecord:
        try:
            return msgspec.convert(dict(doc), cls, strict=False)
        except msgspec.ValidationError as e:
            raise PhaseprofError(f"run.json routing: {e}", path=source or None) from None


@dataclass(frozen=True)
class Routing:
    """A run's measured routing: ``counts[s, l, e]`` tokens of step ``steps[s]`` that layer ``l`` sent to expert
    ``e``; ``ids[step]`` (layers × tokens × k) when kept."""

    record: RoutingRecord
    steps: np.ndarray
    tokens: np.ndarray
    counts: np.ndarray
    ids: dict[int, np.ndarray]

    def distinct(self) -> dict[int, tuple[int, ...]]:
        """Step index -> distinct experts touched per MoE layer."""
        touched = (self.counts > 0).sum(axis=2)
        return {int(s): tuple(int(x) for x in row) for s, row in zip(self.steps, touched)}


def gini(counts: np.ndarray) -> float:
    """Gini coefficient of non-negative loads (0 = equal; (n−1)/n = one holds all); 0 for no load."""
    x = np.sort(np.asarray(counts, dtype=np.float64))
    n, total = len(x), float(x.sum())
    if n == 0 or total == 0:
        return 0.0
    return float(2.0 * np.sum(np.arange(1, n + 1) * x) / (n * total) - (n + 1) / n)


def hottest(counts: np.ndarray) -> list[int]:
    """The ``HOTTEST`` experts of one layer's token counts that got any token: most tokens first, ties by lower
    id."""
    c = np.asarray(counts)
    return [int(e) for e in np.lexsort((np.arange(len(c)), -c))[:HOTTEST] if c[e] > 0]


def counts_of(ids: np.ndarray, num_experts: int) -> np.ndarray:
    """Layers × tokens × k expert ids -> layers × experts token counts."""
    a = np.asarray(ids, dtype=np.int64)
    out = np.zeros((a.shape[0], num_experts), dtype=np.int32)
    for li in range(a.shape[0]):
        out[li] = np.bincount(a[li].ravel(), minlength=num_experts)[:num_experts]
    return out


def write_routing(run_dir: Path, record: RoutingRecord, per_step: list[np.ndarray]) -> RoutingRecord:
    """Write ``routing.npz`` from each recorded step's ids (layers × tokens × k); returns the record as written
    (``ids_kept`` set)."""
    e = record.num_experts
    counts = np.stack([counts_of(ids, e) for ids in per_step]) if per_step else np.zeros((0, 0, e), np.int32)
    keep = sum(ids.size for ids in per_step) <= MAX_IDS_KEPT
    dtype = np.uint8 if e <= 256 else np.int16
    arrays: dict[str, np.ndarray] = {"steps": np.asarray(record.steps, np.int32),
                                     "tokens": np.asarray(record.tokens, np.int32), "counts": counts}
    if keep:
        arrays.update({f"ids_{s}": ids.astype(dtype) for s, ids in zip(record.steps, per_step)})
    rec = msgspec.structs.replace(record, ids_kept=keep)
    np.savez_compressed(run_dir / rec.file, **arrays)
    return rec


def read_routing(run_dir: str | Path, doc: Mapping[str, Any] | None) -> Routing | None:
    """The routing a run recorded (``doc``: run.json's ``routing`` value), or None when it recorded none.
    A named file that is missing or malformed raises PhaseprofError naming it."""
    if not isinstance(doc, Mapping):
        return None
    rec = RoutingRecord.from_dict(doc, source=str(RunDir(Path(run_dir)).record_file))
    if rec.file is None:
        return None
    path = Path(run_dir) / Path(rec.file).name
    try:
        with np.load(path, allow_pickle=False) as z:
            steps, tokens, counts = z["steps"], z["tokens"], z["counts"]
            ids = {int(k.removeprefix("ids_")): z[k] for k in z.files if k.startswith("ids_")}
    except (OSError, KeyError, ValueError) as e:
        raise PhaseprofError(f"routing file not readable: {e}", path=path) from None
    if counts.ndim != 3 or len(steps) != counts.shape[0] or len(tokens) != len(steps):
        raise PhaseprofError(f"routing file: counts {counts.shape} do not match {len(steps)} steps", path=path)
    return Routing(record=rec, steps=steps, tokens=tokens, counts=counts, ids=ids)
