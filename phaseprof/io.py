"""Atomic file and directory writes: a reader never sees a half-written result."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from phaseprof.errors import PhaseprofError

# The files the running command reads, by identity (device, inode): a hard link or a symlink to one of them is
# the same file under another name. Scoped to one command (``inputs_guarded``) so that a later command in the
# same process (the tests call ``cli.main`` many times) is not refused a path that reuses a deleted input's inode.
_inputs: dict[tuple[int, int], str] = {}


@contextlib.contextmanager
def inputs_guarded() -> Iterator[None]:
    """For the duration of one command, :func:`atomic_write_bytes` refuses to write onto a protected input."""
    saved = dict(_inputs)
    _inputs.clear()
    try:
        yield
    finally:
        _inputs.clear()
        _inputs.update(saved)


def protect_inputs(*paths: str | Path | None) -> None:
    """Remember these existing files (symlinks followed) as inputs no output of this command may replace."""
    for p in paths:
        if p is None or str(p) == "-":
            continue
        try:
            st = os.stat(p)
        except (OSError, ValueError):
            continue  # not a file here (a preset name, a missing path the reader will name)
        _inputs.setdefault((st.st_dev, st.st_ino), str(p))


def refuse_input(path: str | Path) -> None:
    """PhaseprofError (exit 2) when ``path`` resolves to a protected input: the same file, a hard link to it or a
    symlink to it. Writing there would replace the user's data with a result."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return  # nothing there yet (or a dangling link): nothing to lose
    src = _inputs.get((st.st_dev, st.st_ino))
    if src is not None:
        same = "the input" if os.path.abspath(src) == os.path.abspath(path) else f"the input {src} (same file)"
        raise PhaseprofError(f"is {same}: refusing to overwrite an input with an output", path=path)


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to a temp file beside ``path``, fsync, then rename over ``path``."""
    path = Path(path)
    refuse_input(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes it 0600; a result file gets the usual permissions
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return path


def _umask() -> int:
    mask = os.umask(0o022)  # reading the umask means setting it; put it straight back
    os.umask(mask)
    return mask


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


@contextlib.contextmanager
def atomic_directory(final: str | Path) -> Iterator[Path]:
    """Yield a temp directory beside ``final``; on success rename it to ``final``, on failure delete it."""
    final = Path(final)
    refuse_input(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    if final.exists():
        raise FileExistsError(f"{final}: already exists")
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent))
    try:
        yield tmp
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
