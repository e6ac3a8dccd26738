"""Benchmark contenders as child processes: one runner for ``bench_loader.py`` and ``bench_memory.py`` (and the
memory sampler ``bench_analyze.py`` uses), so each measures a process the same way.

Each contender is a fresh interpreter (start-up and imports count); its stdout goes to a file (a pipe would fill up
and block the child while the parent samples memory); rounds are interleaved by :func:`interleaved` so that a burst
of load from other work on a shared machine falls on every contender.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from dataclasses import dataclass

#: How often :func:`wait_sampling` samples the process tree's memory (reading a child's smaps takes ~1 ms).
SAMPLE_S = 0.02

#: A contender: its command line and the environment variables it sets on top of this process's.
Command = tuple[list[str], dict[str, str]]


@dataclass(frozen=True)
class ChildRun:
    """One run of one contender."""

    wall_s: float  # process start to exit, seen from here
    cpu_s: float  # its user + system time, with that of the children it waited for (wait4): steadier than wall
    own_peak_bytes: int  # its own peak RSS (``ru_maxrss`` from ``wait4``: exact)
    tree_peak_bytes: int  # its RSS plus its descendants' USS, sampled; at least ``own_peak_bytes``
    stdout: bytes
    started: float  # ``time.time()`` just before it was started (children may report their own clock against it)


def wait_sampling(pid: int) -> tuple[int, os.struct_rusage, int | None]:
    """Wait for ``pid`` (its own exit status and rusage, not its children's) while sampling the physical memory of
    its tree: its RSS plus each descendant's USS. A forked child (the split read's reader) shares the parent's
    pages until either writes them; RSS would count those twice, USS counts the child's own pages only. The
    peak of the sum is what the machine must hold (sampled: a peak shorter than SAMPLE_S can be missed; the
    process's own VmHWM is exact and the larger of the two is reported). None without psutil."""
    try:
        import psutil
    except ImportError:
        _, status, usage = os.wait4(pid, 0)
        return status, usage, None
    peak = 0
    try:
        root = psutil.Process(pid)
    except psutil.NoSuchProcess:
        root = None
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            return status, usage, peak
        try:
            total = root.memory_info().rss if root is not None else 0
            for c in root.children(recursive=True) if root is not None else []:
                try:
                    total += c.memory_full_info().uss
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    pass
            peak = max(peak, total)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
        time.sleep(SAMPLE_S)


def run_child(cmd: list[str], env: dict[str, str] | None = None, cwd: str | None = None) -> ChildRun:
    """Run ``cmd`` (``env`` on top of this process's environment; in ``cwd``) to its end; SystemExit with its
    stderr's tail when it fails."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.time()
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env={**os.environ, **(env or {})}, cwd=cwd)
        status, usage, tree = wait_sampling(proc.pid)
        wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"{' '.join(cmd[:4])}... failed: {err.read().decode()[-2000:]}")
        own = usage.ru_maxrss * 1024
        return ChildRun(wall_s=wall, cpu_s=usage.ru_utime + usage.ru_stime, own_peak_bytes=own,
                        tree_peak_bytes=max(own, tree or 0), stdout=out.read(), started=started)


def interleaved(contenders: dict[str, Command], repeat: int, cwd: str | None = None) -> dict[str, list[ChildRun]]:
    """Every contender's runs, ``repeat`` rounds interleaved (a, b, c, a, b, c, ...). ``cwd``: where they run (a
    ``python -m`` or ``-c`` child puts its working directory first on ``sys.path``, before PYTHONPATH)."""
    runs: dict[str, list[ChildRun]] = {k: [] for k in contenders}
    for _ in range(repeat):
        for name, (cmd, env) in contenders.items():
            runs[name].append(run_child(cmd, env, cwd))
    return runs


def load_average() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())
