"""Collect the rank traces a vLLM server's profiler wrote into ``torch_profiler_dir`` after ``/stop_profile``.

vLLM's workers write ``<worker name>.<time ns>.pt.trace.json[.gz]`` straight to the final path (torch's
``tensorboard_trace_handler``), so a file can be seen half-written. A trace counts as complete when its size has
not changed for ``stable_s`` AND it ends properly: a gzip stream that decompresses to its end, or a JSON text
whose last non-blank byte is ``}``. Only files that were not in the directory before ``/start_profile`` are
taken (a snapshot of names, sizes and mtimes).

Several captures may share one directory (two clients of one server, or of two servers): a new file is only
this capture's when it was written inside this capture's own profile window (:class:`ProfileWindow`). torch's
trace handler names each file with ``time.time_ns()`` taken as the export starts, and vLLM exports inside the
``/stop_profile`` call (``profiler.stop()`` runs ``on_trace_ready`` synchronously in every worker before the
RPC returns): so this capture's traces carry a stamp between the moment its ``/stop_profile`` was sent and the
moment the answer came back. Never "the newest file".
"""

from __future__ import annotations

import re
import time
import zlib
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from phaseprof.errors import PhaseprofError

TRACE_SUFFIXES = (".pt.trace.json.gz", ".pt.trace.json")
#: ``...-rank-3.<ns>.pt.trace.json.gz`` (CPU worker) or ``dp0_pp0_tp1_dcp0_ep1_rank1.<ns>...`` (GPU worker)
_RANK_IN_NAME = re.compile(r"rank-?(\d+)(?:\.\d+)?\.pt\.trace\.json")
#: ``<worker>.<time.time_ns()>.pt.trace.json[.gz]``: the export time torch's trace handler puts in the name.
_STAMP_IN_NAME = re.compile(r"\.(\d{16,20})\.pt\.trace\.json(?:\.gz)?$")
_CHUNK = 1 << 20
#: Clock difference allowed between this machine and the server's workers (same host: none; NTP: milliseconds).
CLOCK_SLACK_S = 0.5

Snapshot = dict[str, tuple[int, int]]  # file name -> (size bytes, mtime ns)


def trace_dir_or_error(path: Path) -> Path:
    """The profiler directory, or one clear error when it does not exist (checked before any request)."""
    if not path.is_dir():
        raise PhaseprofError("trace directory not found (give the server's torch_profiler_dir, as seen from "
                             "this machine, to --trace-dir)", path=path)
    return path


def snapshot(directory: Path) -> Snapshot:
    """Every trace file now in ``directory`` with its size and mtime."""
    out: Snapshot = {}
    for p in directory.iterdir():
        if p.name.endswith(TRACE_SUFFIXES) and p.is_file():
            st = p.stat()
            out[p.name] = (st.st_size, st.st_mtime_ns)
    return out


@dataclass(frozen=True)
class ProfileWindow:
    """When this capture's ``/stop_profile`` was sent and answered (wall clock, ns): its traces were exported
    in between (give or take ``slack_ns`` of clock difference)."""

    stop_sent_ns: int
    stop_done_ns: int
    slack_ns: int = int(CLOCK_SLACK_S * 1e9)

    def holds(self, name: str) -> bool:
        """Whether a trace named ``name`` was exported inside this window (a name without an export stamp is
        nobody's in particular, so not this capture's)."""
        stamp = export_stamp_ns(name)
        return stamp is not None and self.stop_sent_ns - self.slack_ns <= stamp <= self.stop_done_ns + self.slack_ns


def export_stamp_ns(name: str) -> int | None:
    """The ``time.time_ns()`` torch's trace handler put in a trace's file name, when it did."""
    m = _STAMP_IN_NAME.search(name)
    return int(m.group(1)) if m else None


def new_files(directory: Path, before: Snapshot, window: ProfileWindow | None = None) -> dict[Path, int]:
    """Trace files that are new or rewritten since ``before`` (and exported inside ``window``, when given),
    with their sizes now, in name order."""
    return {directory / n: meta[0] for n, meta in sorted(snapshot(directory).items())
            if before.get(n) != meta and (window is None or window.holds(n))}


def rank_from_name(name: str) -> int | None:
    """The global rank vLLM put in a trace's file name, when it did."""
    m = _RANK_IN_NAME.search(name)
    return int(m.group(1)) if m else None


#: Decompressed bytes :func:`ends_properly` looks through at most: past them the file is taken as written (the
#: trace reader then refuses it in one line: ``capture.server.capture.MAX_SERVER_TRACE_BYTES``), so a gzip bomb
#: costs neither memory nor minutes here.
MAX_CHECKED_BYTES = 1 << 30


def ends_properly(path: Path) -> bool:
    """True when the file is a complete gzip stream (decompressed to its end, or past ``MAX_CHECKED_BYTES``) or
    JSON ending in ``}``. Output is decompressed a chunk at a time and dropped (bounded memory)."""
    if path.name.endswith(".gz"):
        d = zlib.decompressobj(wbits=31)
        seen = 0
        try:
            with path.open("rb") as f:
                while (chunk := f.read(_CHUNK)) and not d.eof:
                    while not d.eof:  # until this chunk is consumed and zlib holds no more output
                        out = d.decompress(chunk, _CHUNK)
                        seen += len(out)
                        if seen > MAX_CHECKED_BYTES:
                            return True
                        chunk = d.unconsumed_tail
                        if not chunk and len(out) < _CHUNK:
                            break
        except (OSError, zlib.error):
            return False
        return d.eof
    try:
        with path.open("rb") as f:
            f.seek(max(0, path.stat().st_size - 64))
            return f.read().rstrip().endswith(b"}")
    except OSError:
        return False


@dataclass(frozen=True)
class Collected:
    """The new rank traces, complete. ``ranks``: rank per file (from the file name; None when it has none)."""

    files: tuple[Path, ...]
    ranks: tuple[int | None, ...]
    waited_s: float


K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class Watched(Generic[K]):
    """What :func:`watch_new_traces` saw: the complete new files (sorted), how many new files there were, how long
    it waited, and whether it stopped at the time limit."""

    done: tuple[K, ...]
    seen: int
    waited_s: float
    timed_out: bool


def watch_new_traces(list_new: Callable[[], dict[K, int]], complete: Callable[[list[K]], set[K]],
                     rank_of: Callable[[K], int | None], *, expected: int | None, timeout_s: float,
                     stable_s: float = 1.0, poll_s: float = 0.25,
                     on_wait: Callable[[str], None] | None = None) -> Watched[K]:
    """The waiting logic of :func:`wait_for_traces`, wherever the files are. ``list_new``: new files now, with
    their sizes; ``complete``: which of the given files (size unchanged for ``stable_s``) end properly. Stops
    when ``expected`` rank files are complete (when known; else at least one and no new file for
    ``2 * stable_s``) and every new file is; or at ``timeout_s``, with whatever is complete then."""
    t0 = time.monotonic()
    sizes: dict[K, tuple[int, float]] = {}  # file -> (size, since when that size)
    ended: set[tuple[K, int]] = set()  # (file, size) known to end properly: not decompressed again
    names: tuple[K, ...] = ()
    names_since = t0
    while True:
        elapsed = time.monotonic() - t0
        files = list_new()
        now = time.monotonic()
        if tuple(sorted(files)) != names:
            names, names_since = tuple(sorted(files)), now
        stable = []
        for k, size in files.items():
            prev = sizes.get(k)
            if prev is None or prev[0] != size:
                sizes[k] = (size, now)
            elif now - prev[1] >= stable_s and size > 0:
                stable.append(k)
        unknown = [k for k in stable if (k, files[k]) not in ended]
        if unknown:
            ended.update((k, files[k]) for k in complete(unknown))
        done = sorted(k for k in stable if (k, files[k]) in ended)
        ranks_done = sum(1 for k in done if rank_of(k) is not None)
        # Without an expected count, wait until no new file has appeared for a while (ranks flush in turn).
        enough = ranks_done >= expected if expected else (ranks_done > 0 and now - names_since >= 2 * stable_s)
        if enough and len(done) == len(files):
            return Watched(tuple(done), len(files), round(elapsed, 3), False)
        if elapsed > timeout_s:
            # More new files than ranks (another client also profiled), or some never completed: the complete ones.
            return Watched(tuple(done), len(files), round(elapsed, 3), True)
        if on_wait is not None:
            on_wait(f"waiting for rank traces: {len(done)} complete of {len(files)} new"
                    + (f" ({expected} expected)" if expected else ""))
        time.sleep(poll_s)


def wait_for_traces(directory: Path, before: Snapshot, *, expected: int | None, timeout_s: float,
                    stable_s: float = 1.0, poll_s: float = 0.25, window: ProfileWindow | None = None,
                    on_wait: Callable[[str], None] | None = None) -> Collected:
    """Wait until the new trace files (of ``window`` only, when given) are complete: ``expected`` of them when
    known, else at least one and no new file for ``stable_s``. Raises one clear error when nothing (or nothing
    complete) appeared in time, or when one rank has several traces in the window."""
    w = watch_new_traces(lambda: new_files(directory, before, window),
                         lambda ps: {p for p in ps if ends_properly(p)}, lambda p: rank_from_name(p.name),
                         expected=expected, timeout_s=timeout_s, stable_s=stable_s, poll_s=poll_s, on_wait=on_wait)
    if w.timed_out and not w.seen:
        others = len(new_files(directory, before)) if window is not None else 0
        raise PhaseprofError(f"no new trace appeared within {timeout_s:g} s after /stop_profile; is "
                             "this the server's torch_profiler_dir (on this machine)?"
                             + (f" ({others} new trace(s) there were exported outside this capture's "
                                "/stop_profile: another client's profile, or a profiler that stopped by itself, "
                                "as with --profiler-config max_iterations)" if others else ""), path=directory)
    if w.timed_out and not w.done:
        raise PhaseprofError(f"{w.seen} new trace file(s) appeared but none was complete within "
                             f"{timeout_s:g} s (still being written?)", path=directory)
    ranks = tuple(rank_from_name(p.name) for p in w.done)
    check_one_per_rank(ranks, [p.name for p in w.done])
    return Collected(w.done, ranks, w.waited_s)


def check_one_per_rank(ranks: tuple[int | None, ...], names: list[str]) -> None:
    """Refuse, naming the files, when one rank has several new traces: they cannot all be this capture's (two
    clients profiled at once), and picking one would be a guess."""
    seen: dict[int, list[str]] = {}
    for r, n in zip(ranks, names, strict=True):
        if r is not None:
            seen.setdefault(r, []).append(n)
    twice = {r: ns for r, ns in seen.items() if len(ns) > 1}
    if twice:
        r, ns = min(twice.items())
        raise PhaseprofError(f"rank {r} has {len(ns)} new traces in this capture's profile window ({', '.join(ns)}): "
                             "two profiles ended at once (another capture shares this trace directory); not guessing "
                             "which is this capture's (run the captures one after the other)")


def missing_ranks(found: list[int | None], world_size: int | None) -> list[int]:
    """Ranks 0..world_size-1 with no trace among ``found`` (empty when the world size is unknown)."""
    if not world_size:
        return []
    return sorted(set(range(world_size)) - {r for r in found if r is not None})


def missing_ranks_message(missing: list[int], world_size: int, directory: Path) -> str:
    """What to tell the user when some ranks' traces are not in the directory (multi-node without Ray)."""
    return (f"{directory}: rank(s) {', '.join(map(str, missing))} of {world_size} have no trace here; their "
            "workers run on other nodes and wrote there: run `phaseprof analyze` on those nodes' "
            "torch_profiler_dir (or collect the files here); the breakdown below covers "
            f"{world_size - len(missing)} of {world_size} ranks")


@dataclass(frozen=True)
class RankTraces:
    """The analysed traces of one profiled round: breakdown per rank (empty when the analysis failed, then
    ``error`` says why), the run.json ``trace`` entry, warnings (ranks missing from the directory) and, with
    several ranks, their cross-rank summary (``scale.ranks.RankSummary``, written as ``multirank.json``)."""

    breakdowns: dict[int, Any]
    error: str | None
    trace_doc: dict[str, Any]
    warnings: tuple[str, ...]
    summary: Any = None
