"""Run directories: ``runs/<UTC time>-<gpu|cpu>-<model>-<phase>-<tokens>/``, written atomically.

A capture's directory holds ``trace.json.gz``, ``breakdown.json`` (from ``analyze``) and ``run.json``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import sys
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console

from phaseprof.io import atomic_write_bytes
from phaseprof.records import RUN_SCHEMA_VERSION, RunRecord  # noqa: F401 - RUN_SCHEMA_VERSION kept importable from here


def utc_stamp(now: dt.datetime | None = None) -> str:
    """``20261130T083500Z``: sortable, file-name safe."""
    now = now or dt.datetime.now(dt.timezone.utc)
    return now.strftime("%Y%m%dT%H%M%SZ")


def tokens_label(phase: str, prompt_tokens: int, output_tokens: int) -> str:
    """``4096`` for prefill; ``128in-32out`` for decode."""
    return str(prompt_tokens) if phase == "prefill" else f"{prompt_tokens}in-{output_tokens}out"


def run_dir_name(*, device_slug: str, model_slug: str, phase: str, tokens: str, stamp: str | None = None) -> str:
    return f"{stamp or utc_stamp()}-{device_slug}-{model_slug}-{phase}-{tokens}"


def unique_run_dir(root: Path, name: str) -> Path:
    """``root/name``, or ``root/name-2``, ... when two runs start within the same second."""
    path = root / name
    k = 2
    while path.exists():
        path = root / f"{name}-{k}"
        k += 1
    return path


def make_readable(directory: Path) -> None:
    """Give a finished run directory ordinary permissions (temp directories and files start private)."""
    umask = os.umask(0)
    os.umask(umask)
    directory.chmod(0o777 & ~umask)
    for p in directory.rglob("*"):
        p.chmod((0o777 if p.is_dir() else 0o666) & ~umask)


def write_json(path: Path, data: Any) -> Path:
    """Indented, key-sorted JSON, written atomically."""
    return atomic_write_bytes(path, orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS |
                                                 orjson.OPT_SERIALIZE_NUMPY) + b"\n")


def command_line(argv: list[str] | None = None) -> list[str]:
    """The command that produced a run: ``argv`` when the caller knows it (the CLI passes its canonical form,
    every option spelled out), else this process's ``sys.argv``."""
    if argv is not None:
        return list(argv)
    args = list(sys.argv)
    if args and args[0].endswith(("phaseprof", "__main__.py", "cli.py")):
        args[0] = "phaseprof"
    return args


def in_final_place(summary: Any, tmp: Path, final: Path) -> Any:
    """A multi-rank summary (``scale.ranks.RankSummary``) of traces analysed inside the run directory being
    written (``tmp``) with their paths where they will be once it is renamed to ``final``: trace paths of
    files elsewhere (other nodes') are left as they are."""
    prefix = str(tmp).rstrip("/") + "/"

    def moved(path: str | None) -> str | None:
        return str(final) + "/" + path[len(prefix):] if path and path.startswith(prefix) else path

    ranks = {r: bd.naming_trace(moved(bd.trace.path)) for r, bd in summary.ranks.items()}
    return dataclasses.replace(summary, ranks=ranks, paths={r: moved(p) for r, p in summary.paths.items()})


def analyze_into(trace: Path, run_dir: Path, *, final_trace: Path | None = None,
                 model_config: dict[str, Any] | None = None) -> tuple[Any | None, str | None]:
    """Run phaseprof's analysis on ``trace`` and write ``run_dir/breakdown.json`` (with its speed-of-light
    section).

    ``final_trace``: where the trace will live once the run directory is renamed into place (the breakdown
    names that path, not the temporary one). ``model_config``: the model's config.json content, as run.json
    will record it (it is written after the analysis); it gives the speed of light its model.

    Returns (Breakdown, None), or (None, reason) when the analysis is not available or fails; a capture still
    succeeds without a breakdown (the trace is the primary artefact) and run.json records the reason.
    """
    try:
        from phaseprof.analysis.pipeline import AnalysisConfig, analyze  # noqa: PLC0415
        from phaseprof.report.json_io import write_breakdown  # noqa: PLC0415
        from phaseprof.sol.attach import reported  # noqa: PLC0415
    except ImportError as e:
        return None, f"analysis not available: {e}"
    try:
        capture = RunRecord(model_config=model_config) if model_config else None
        bd = reported(analyze(trace, config=AnalysisConfig(capture=capture)))
        if final_trace is not None and dataclasses.is_dataclass(getattr(bd, "trace", None)):
            bd = bd.naming_trace(str(final_trace))
        write_breakdown(bd, run_dir / "breakdown.json")
    except Exception as e:  # noqa: BLE001 - the trace is still worth keeping
        return None, f"analysis failed: {type(e).__name__}: {e}"
    return bd, None


def print_table(bd: Any, console: Console) -> None:
    """The analysis' bucket table, if the report module is available."""
    try:
        from phaseprof.report.table import print_breakdown  # noqa: PLC0415
    except ImportError:
        return
    from phaseprof.safe_text import for_terminal  # noqa: PLC0415

    print_breakdown(for_terminal(bd), console)  # real kernel names carry "[with T = ...]": rich markup
