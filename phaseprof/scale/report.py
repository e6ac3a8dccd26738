"""The multi-rank report as a record: one JSON document per rank directory or cluster glob (for PRs), with its
schema generated from these dataclasses. Per-rank breakdowns are written beside it as ``rank<N>.breakdown.json``."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import orjson

from phaseprof import __version__
from phaseprof.scale.ranks import RankSummary, StepImbalance
from phaseprof.io import atomic_write_bytes
from phaseprof.scale.collectives import CollectiveReport

# 1.1: collectives.expert_parallel (EP dispatch/combine per rank and step vs MoE compute)
MULTIRANK_SCHEMA_VERSION = "1.1"
SCHEMA_PATH = Path(__file__).with_name("multirank.schema.json")


@dataclass(frozen=True)
class RankLine:
    """One rank's totals. Times in microseconds; shares in percent of that rank's GPU busy time."""

    rank: int
    path: str
    analysed_on: str  # host whose process analysed the file (with --ray: the node that holds it)
    gpu_name: str | None
    steps: int
    gpu_busy_us: float
    communication_busy_us: float
    communication_share_pct: float
    communication_overlap_pct: float  # of communication time, the part that overlapped compute kernels


@dataclass(frozen=True)
class MultiRankReport:
    schema_version: str
    kind: str  # always "multi-rank"
    tool: dict[str, str]
    world_size: int
    ranks: list[RankLine]
    imbalance: list[StepImbalance]  # per step: compute (busy minus communication) per rank
    collectives: CollectiveReport | None  # who waited for whom; None when no collective ran on every rank
    warnings: list[str] = field(default_factory=list)


def build_report(s: RankSummary) -> MultiRankReport:
    lines = [RankLine(rank=r, path=s.paths.get(r, bd.trace.path), analysed_on=s.analysed_on.get(r, ""),
                      gpu_name=bd.trace.gpu_name, steps=len(bd.steps), gpu_busy_us=bd.totals["gpu_busy_us"],
                      communication_busy_us=bd.totals.get("communication_busy_us", 0.0),
                      communication_share_pct=s.communication_share_pct[r],
                      communication_overlap_pct=s.communication_overlap_pct[r]) for r, bd in s.ranks.items()]
    return MultiRankReport(schema_version=MULTIRANK_SCHEMA_VERSION, kind="multi-rank",
                           tool={"name": "phaseprof", "version": __version__}, world_size=s.world_size,
                           ranks=lines, imbalance=list(s.steps), collectives=s.collectives,
                           warnings=list(s.warnings))


def dumps(report: MultiRankReport) -> bytes:
    return orjson.dumps(dataclasses.asdict(report),
                        option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY)


def write_report(report: MultiRankReport, path: str | Path) -> Path:
    return atomic_write_bytes(path, dumps(report) + b"\n")


def json_schema() -> dict[str, Any]:
    schema = msgspec.json.schema(MultiRankReport)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = f"phaseprof multi-rank report, schema_version {MULTIRANK_SCHEMA_VERSION}"
    return schema


def write_rank_outputs(summary: RankSummary, directory: Path) -> Path:
    """``rank<N>.breakdown.json`` per rank and ``multirank.json`` into ``directory``; the report's path."""
    from phaseprof.report.json_io import write_breakdown

    directory.mkdir(parents=True, exist_ok=True)
    for r, bd in summary.ranks.items():
        write_breakdown(bd, directory / f"rank{r}.breakdown.json")
    return write_report(build_report(summary), directory / "multirank.json")
