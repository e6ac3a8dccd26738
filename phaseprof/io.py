"""Atomic file and directory writes: a reader never sees a half-written result. Bounded reads of a regular file
(:func:`read_regular`): a FIFO, a device or a directory where a file is expected is one line, never a hang."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
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


def read_regular(path: str | Path, *, what: str, max_bytes: int, head: bool = False) -> bytes:
    """The whole content of ``path``, a regular file (symlinks followed) of at most ``max_bytes``; else one
    PhaseprofError naming it and the problem (``what``: what the file should be). Opened without blocking and
    checked on the open descriptor (a FIFO would wait for a writer for ever, ``/dev/zero`` never ends, a
    directory is no file), then read at most ``max_bytes + 1`` bytes (a file that grows while read is caught).
    ``head``: its first ``max_bytes`` are enough (a log whose start is read), a longer file is no error."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise PhaseprofError(f"no such file: cannot read {what}", path=p) from None
    except IsADirectoryError:
        raise PhaseprofError(f"is a directory, not {what}", path=p) from None
    except (OSError, ValueError) as e:  # ValueError: a NUL in the path
        raise PhaseprofError(f"cannot read {what}: {getattr(e, 'strerror', None) or e}", path=p) from None
    size = f"{max_bytes >> 20} MB" if max_bytes >= 1 << 20 else f"{max_bytes:,} bytes"
    st = os.fstat(fd)
    problem = (f"is a directory, not {what}" if stat.S_ISDIR(st.st_mode) else
               f"not a regular file (a FIFO, device or socket): expected {what}" if not stat.S_ISREG(st.st_mode) else
               f"over {size}: not {what}" if st.st_size > max_bytes and not head else None)
    if problem:
        os.close(fd)
        raise PhaseprofError(problem, path=p)
    with os.fdopen(fd, "rb") as f:
        try:
            data = f.read(max_bytes + (0 if head else 1))
        except OSError as e:
            raise PhaseprofError(f"cannot read {what}: {e.strerror or e}", path=p) from None
    if len(data) > max_bytes:
        raise PhaseprofError(f"over {size}: not {what}", path=p)
    return data
