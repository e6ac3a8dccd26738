"""What the dashboard may read: run directories, traces and breakdowns under the runs directory, and uploads.

Safety rule: every file the dashboard opens goes through ``guard``, which resolves symlinks and refuses any
path outside the allowed roots (the runs directory and this server's private upload directory). Nothing is
unpickled or evaluated; traces and breakdowns are parsed by phaseprof's own readers (msgspec / orjson).
No Streamlit here, so everything in this module is testable as plain functions.
"""

from __future__ import annotations

import csv
import hashlib
import os
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from phaseprof.errors import PhaseprofError
from phaseprof.inputs import BREAKDOWN_NAME, RUN_MARKERS, SWEEP_NAME, TRACE_NAMES, InputKind, file_kind
from phaseprof.records import RunDir

#: runs/<sweep>/<run>/... is as deep as capture writes; the committed tree keeps runs 5 deep below traces/
#: (<gpu>/<study>/<config>/profiled/<run>): the Pareto page must find profiled runs wherever it finds their sweeps.
MAX_SCAN_DEPTH = 6
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")
#: Longest stored upload name (after the 13-character hash prefix): file systems allow 255 bytes.
MAX_UPLOAD_NAME = 120
#: Longest path the "Add path" box accepts (Linux PATH_MAX).
MAX_PATH_CHARS = 4096
_CONTROL = re.compile("[\x00-\x1f\x7f]")
#: Session-state key of the files added by path on the Runs page.
ADDED_PATHS = "added_paths"


class Kind:
    RUN = "run"  # a run directory written by ``phaseprof capture``
    TRACE = "trace"  # a loose Kineto trace
    BREAKDOWN = "breakdown"  # a loose breakdown JSON


@dataclass(frozen=True)
class Source:
    """One thing the user can look at. ``key`` is unique: the path relative to its root, uploads prefixed."""

    key: str
    kind: str
    path: Path  # run directory or file
    trace: Path | None = None
    breakdown: Path | None = None
    run_json: Path | None = None
    description: str = ""  # from a MANIFEST.tsv beside the file ("what" column), if any
    size_bytes: int = 0  # of the trace (or breakdown) file
    mtime: float = 0.0

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def has_trace(self) -> bool:
        return self.trace is not None


@dataclass(frozen=True)
class Roots:
    """The directories the dashboard may read from."""

    runs_dir: Path
    upload_dir: Path

    def all(self) -> tuple[Path, ...]:
        return (self.runs_dir, self.upload_dir)


def guard(path: str | Path, roots: Roots) -> Path:
    """The resolved ``path`` if it lies under one of ``roots`` (symlinks followed first), else PhaseprofError."""
    p = Path(path).expanduser()
    try:
        real = p.resolve(strict=True)
    except (OSError, RuntimeError, ValueError):  # ValueError: a NUL in the path
        raise PhaseprofError("no such file or directory", path=p) from None
    for root in roots.all():
        try:
            real.relative_to(root.resolve())
            return real
        except ValueError:
            continue
    raise PhaseprofError(f"outside the runs directory {roots.runs_dir} (the dashboard only reads files there "
                         "or ones you upload)", path=p)


def resolve_user_path(text: str, roots: Roots) -> Path:
    """A path typed by the user: relative paths are taken from the runs directory; must stay inside it."""
    text = text.strip().strip('"').strip("'")
    if not text:
        raise PhaseprofError("enter a path")
    if _CONTROL.search(text):
        raise PhaseprofError("a path cannot contain control characters (NUL, newline, ...)")
    if len(text) > MAX_PATH_CHARS:
        raise PhaseprofError(f"path too long ({len(text):,} characters; at most {MAX_PATH_CHARS:,})")
    p = Path(text).expanduser()
    return guard(p if p.is_absolute() else roots.runs_dir / p, roots)


def guard_members(d: Path, names: tuple[str, ...], roots: Roots) -> None:
    """Refuse (PhaseprofError) when one of the files ``names`` in directory ``d`` that a reader would open is a
    symlink leading outside the roots: a guarded directory can still hold links to files elsewhere."""
    for n in names:
        f = d / n
        if f.is_symlink() or f.exists():
            guard(f, roots)


def added_key(p: Path, roots: Roots) -> str:
    """The source key of a file added by path: its path under the runs directory, else ``added/<name>``."""
    try:
        return p.relative_to(roots.runs_dir).as_posix()
    except ValueError:
        return "added/" + p.name


def listed_kind(path: Path) -> str | None:
    """What a loose file under the runs directory is to the Runs page (``inputs.file_kind``: the one
    classifier): ``Kind.BREAKDOWN``, ``Kind.TRACE``, or None for anything else (a run's ``startup.json``,
    ``summary.json``, ``result.json``, a ceilings file, a record), which the page does not list."""
    return {InputKind.BREAKDOWN: Kind.BREAKDOWN, InputKind.TRACE: Kind.TRACE}.get(file_kind(path))


def _manifest(d: Path, root: Path) -> dict[str, str]:
    """``file -> what`` from a MANIFEST.tsv in ``d`` (the public trace directory carries one)."""
    m = d / "MANIFEST.tsv"
    if not _inside(m, root):
        return {}
    try:
        with m.open(newline="", encoding="utf-8") as f:
            return {r["file"]: r.get("what", "") or "" for r in csv.DictReader(f, delimiter="\t") if r.get("file")}
    except (OSError, KeyError, csv.Error, UnicodeDecodeError):
        return {}


def _inside(f: Path, root: Path) -> bool:
    """``f`` is a file whose real path (symlinks followed) lies under ``root``."""
    try:
        return f.is_file() and f.resolve().is_relative_to(root)
    except (OSError, RuntimeError):
        return False


def _run_source(d: Path, key: str, root: Path) -> Source:
    """A run directory; a marker file that is a symlink leading outside ``root`` counts as absent."""
    trace = next((d / n for n in TRACE_NAMES if _inside(d / n, root)), None)
    bd = d / BREAKDOWN_NAME
    rj = RunDir(d).record_file
    has_bd, has_rj = _inside(bd, root), _inside(rj, root)
    main = trace if trace is not None else (bd if has_bd else rj if has_rj else None)
    st = main.stat() if main is not None else d.stat()
    return Source(key=key, kind=Kind.RUN, path=d, trace=trace, breakdown=bd if has_bd else None,
                  run_json=rj if has_rj else None, size_bytes=st.st_size, mtime=st.st_mtime)


def file_source(f: Path, key: str, description: str = "") -> Source:
    """A loose trace or breakdown file."""
    st = f.stat()
    is_bd = file_kind(f) is InputKind.BREAKDOWN
    return Source(key=key, kind=Kind.BREAKDOWN if is_bd else Kind.TRACE, path=f,
                  trace=None if is_bd else f, breakdown=f if is_bd else None, description=description,
                  size_bytes=st.st_size, mtime=st.st_mtime)


def scan(root: Path, *, prefix: str = "", every_file: bool = False) -> tuple[list[Source], list[Path]]:
    """Run directories, loose traces and breakdowns under ``root``, and the sweep files there.

    A directory holding any of ``RUN_MARKERS`` is one run (not descended into). Hidden entries and symlinks
    leading outside ``root`` are skipped, and so are JSON files that are neither trace nor breakdown
    (``listed_kind``) unless ``every_file`` (the uploads: each one the user chose, listed with its error).
    """
    root = root.resolve()
    if not root.is_dir():
        raise PhaseprofError("runs directory does not exist", path=root)
    sources: list[Source] = []
    sweeps: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        d = Path(dirpath)
        depth = len(d.relative_to(root).parts)
        dirnames[:] = sorted(n for n in dirnames if not n.startswith(".")) if depth < MAX_SCAN_DEPTH else []
        rel = d.relative_to(root).as_posix()
        if SWEEP_NAME in filenames:
            sweeps.append(d / SWEEP_NAME)
        if d != root and any(m in filenames for m in RUN_MARKERS):
            sources.append(_run_source(d, prefix + rel, root))
            dirnames[:] = []
            continue
        manifest = None
        for n in sorted(filenames):
            f = d / n
            if not n.endswith((".json", ".json.gz")) or n.startswith(".") or not f.is_file():
                continue
            try:
                f.resolve().relative_to(root)
            except ValueError:  # a symlink pointing outside the runs directory
                continue
            if manifest is None:
                manifest = _manifest(d, root)
            key = prefix + (n if d == root else f"{rel}/{n}")
            if not every_file and listed_kind(f) is None:  # uploads are all listed: the user chose them
                continue
            try:
                sources.append(file_source(f, key, manifest.get(n, "")))
            except OSError:
                continue
    return sources, sorted(sweeps)


def save_upload(name: str, data: bytes, upload_dir: Path) -> Path:
    """Store uploaded bytes in the private upload directory as ``<sha256[:12]>-<safe name>``."""
    safe = _SAFE_NAME.sub("_", Path(name.replace("\x00", "_")).name).lstrip(".") or "upload.json"
    if not safe.endswith((".json", ".json.gz")):
        raise PhaseprofError("expected a .json or .json.gz file (a Kineto trace or a phaseprof breakdown)",
                             path=safe if len(safe) <= MAX_UPLOAD_NAME else safe[:MAX_UPLOAD_NAME] + "…")
    if len(safe) > MAX_UPLOAD_NAME:  # keep the end: the extension says what the file is
        safe = safe[len(safe) - MAX_UPLOAD_NAME:].lstrip(".") or "upload.json"
    upload_dir.mkdir(parents=True, exist_ok=True)
    dest = upload_dir / f"{hashlib.sha256(data).hexdigest()[:12]}-{safe}"
    if not dest.exists():
        tmp = dest.with_name(f".{dest.name}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, dest)
    return dest


def iso_time(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%d %H:%M")
