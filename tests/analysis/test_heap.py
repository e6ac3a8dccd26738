"""``analysis.heap.kept_heap``: glibc's heap settings changed for the analysis and set back after it, once for
analyses that overlap (the dashboard's threads) and when one fails."""

from __future__ import annotations

import resource
import sys
import threading

import numpy as np
import pytest

from phaseprof.analysis import heap


class _Libc:
    """Records mallopt / malloc_trim calls (the real ones change this process' allocator)."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def mallopt(self, param: int, value: int) -> int:
        self.calls.append(("mallopt", param, value))
        return 1

    def malloc_trim(self, pad: int) -> int:
        self.calls.append(("malloc_trim", pad))
        return 1


KEEP = [("mallopt", heap._M_MMAP_MAX, 0), ("mallopt", heap._M_TRIM_THRESHOLD, 1 << 30)]
BACK = [("mallopt", heap._M_MMAP_MAX, heap._DEFAULT_MMAP_MAX),
        ("mallopt", heap._M_TRIM_THRESHOLD, heap._DEFAULT_TRIM_THRESHOLD), ("malloc_trim", 0)]


def test_set_once_for_nested_analyses_and_back_after_a_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    libc = _Libc()
    monkeypatch.setattr(heap, "_glibc", lambda: libc)
    with heap.kept_heap():
        assert libc.calls == KEEP
        with heap.kept_heap():
            pass
        assert libc.calls == KEEP  # the inner one neither sets again nor sets back
    assert libc.calls == KEEP + BACK
    libc.calls.clear()
    with pytest.raises(ValueError):
        with heap.kept_heap():
            raise ValueError("an analysis failed")
    assert libc.calls == KEEP + BACK and heap._inside == 0


def test_overlapping_threads_set_back_once(monkeypatch: pytest.MonkeyPatch) -> None:
    libc = _Libc()
    monkeypatch.setattr(heap, "_glibc", lambda: libc)
    inside, leave = threading.Barrier(3), threading.Event()

    def analysis() -> None:
        with heap.kept_heap():
            inside.wait()
            leave.wait()

    workers = [threading.Thread(target=analysis) for _ in range(2)]
    for w in workers:
        w.start()
    inside.wait()
    assert libc.calls == KEEP
    leave.set()
    for w in workers:
        w.join()
    assert libc.calls == KEEP + BACK


@pytest.mark.skipif(not sys.platform.startswith("linux") or heap._glibc() is None, reason="glibc only")
def test_real_glibc_freed_large_blocks_are_not_faulted_in_again() -> None:
    """With the real allocator: inside, a freed 64 MB block comes back already mapped (refilling it page-faults a
    handful of times at most; fresh pages fault at least once per 2 MB huge page: 32), and afterwards the process
    allocates as before."""
    def faults_of_a_fresh_block() -> int:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        b = np.ones(8 << 20)
        after = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        del b
        return after - before

    with heap.kept_heap():
        a = np.ones(8 << 20)
        del a
        assert faults_of_a_fresh_block() < 8
    assert heap._inside == 0
    c = np.ones(8 << 20)
    assert float(c.sum()) == 8 << 20
