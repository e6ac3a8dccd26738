"""The C heap while the analysis runs: freed whole-column temporaries kept for the next ones.

The analysis makes and frees dozens of temporaries of a whole column (40 MB each at 4.9M ops). glibc serves every
block above its mmap threshold from fresh pages and unmaps it when freed, so each one page-faults afresh: at
2.1 GB that was ~0.7 of the analysis' ~3.2 CPU-s, as system time. Within :func:`kept_heap` large blocks come from
the heap and freed ones stay there to be reused (measured: system time 0.7-0.9 -> 0.15-0.5 s, the analysis' peak
RSS +1 %); afterwards glibc's defaults are set back and the free pages handed back (``malloc_trim``). Elsewhere
than glibc on Linux nothing changes.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4  # glibc's malloc.h
_DEFAULT_TRIM_THRESHOLD, _DEFAULT_MMAP_MAX = 128 * 1024, 65536  # glibc's defaults
_lock = threading.Lock()
_inside = 0  # analyses running now (the dashboard may run two at once): the first sets, the last sets back


def _glibc():  # noqa: ANN202 - a ctypes.CDLL, or None
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        libc.mallopt, libc.malloc_trim  # noqa: B018 - glibc only (musl has neither)
        return libc
    except (OSError, AttributeError):
        return None


@contextmanager
def kept_heap() -> Iterator[None]:
    """Within: large blocks from the heap (no mmap), freed memory kept there (no trim below 1 GiB)."""
    global _inside
    libc = _glibc()
    if libc is None:
        yield
        return
    with _lock:
        if _inside == 0:
            libc.mallopt(_M_MMAP_MAX, 0)
            libc.mallopt(_M_TRIM_THRESHOLD, 1 << 30)
        _inside += 1
    try:
        yield
    finally:
        with _lock:
            _inside -= 1
            if _inside == 0:
                libc.mallopt(_M_MMAP_MAX, _DEFAULT_MMAP_MAX)
                libc.mallopt(_M_TRIM_THRESHOLD, _DEFAULT_TRIM_THRESHOLD)
                libc.malloc_trim(0)
