"""Run directories: ``runs/<UTC time>-<gpu|cpu>-<model>-<phase>-<tokens>/``, written atomically.

A capture's directory holds ``trace.json.gz``, ``breakdown.json`` (from ``analyze``) and ``run.json``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console

from phaseprof.errors import PhaseprofError
from phaseprof.io import atomic_directory, atomic_write_bytes
from phaseprof.records import RunRecord


def slugify(text: str) -> str:
    """A file-name-safe lower-case slug: letters, digits, '.', '-' only."""
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-") or "model"


def utc_stamp(now: dt.datetime | None = None) -> str:
    """``20261130T083500Z``: sortable, file-name safe."""
    now = now or dt.datetime.now(dt.timezone.utc)
    return now.strftime("%Y%m%dT%H%M%SZ")


def run_dir_name(*, device_slug: str, model_slug: str, phase: str, tokens: str, stamp: str | None = None) -> str:
    return f"{stamp or utc_stamp()}-{device_slug}-{model_slug}-{phase}-{tokens}"


def _reservation(path: Path) -> Path:
    return path.with_name(f".{path.name}{RESERVED_SUFFIX}")


#: ``root/.<name>.reserved``: an empty file held by the run being written under that name (see unique_run_dir).
RESERVED_SUFFIX = ".reserved"


def unique_run_dir(root: Path, name: str) -> Path:
    """``root/name``, or ``root/name-2``, ...: a name no finished run has and no run still being written holds.

    Two captures started in the same second (or processes racing) must not get one name: the second would lose
    its run at the final rename. The name is reserved by creating ``root/.<name>.reserved`` with O_EXCL (atomic
    between processes, on one machine or over NFS v3+), then checked free of a finished run; the reservation is
    dropped by :func:`run_directory` once the run is renamed into place, or has failed. A reservation left by a
    killed process only makes later runs skip that name."""
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise PhaseprofError(f"cannot make the output directory (--out): {e.strerror or e}", path=root) from None
    for k in itertools.count(1):
        path = root / (name if k == 1 else f"{name}-{k}")
        try:
            os.close(os.open(_reservation(path), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        except FileExistsError:
            continue  # another run holds this name
        except OSError as e:
            raise PhaseprofError(f"cannot write a run directory here (--out): {e.strerror or e}", path=root) from None
        if not path.exists():
            return path
        _reservation(path).unlink()  # finished already (its reservation was dropped after its rename)
    raise AssertionError("unreachable")


@contextmanager
def run_directory(final: Path) -> Iterator[Path]:
    """:func:`phaseprof.io.atomic_directory` for a run directory named by :func:`unique_run_dir`: yields the
    temporary directory to fill, renames it to ``final`` on success (deletes it on failure), then drops the
    name's reservation."""
    try:
        with atomic_directory(final) as tmp:
            yield tmp
    finally:
        _reservation(final).unlink(missing_ok=True)


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
                 model_config: dict[str, Any] | None = None,
                 routing: dict[str, Any] | None = None, quant: str | None = None) -> tuple[Any | None, str | None]:
    """Run phaseprof's analysis on ``trace`` and write ``run_dir/breakdown.json`` (with its speed-of-light
    section).

    ``final_trace``: where the trace will live once the run directory is renamed into place (the breakdown
    names that path, not the temporary one). ``model_config``: the model's config.json content, as run.json
    will record it (it is written after the analysis); it gives the speed of light its model. ``routing``:
    run.json's ``routing`` value (``routing.npz`` already in ``run_dir``): the MoE floor reads measured experts.
    ``quant``: the weights' format as served (a server's ``fp8``): the floor reads weights at its bytes.

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
        capture = None
        if model_config or (routing and routing.get("file")):
            capture = RunRecord(model_config=model_config or None, quant=quant,
                                routing=routing if routing and routing.get("file") else None)
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
