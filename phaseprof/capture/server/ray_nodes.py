"""``capture --server --ray``: the new rank traces of a multi-node server, wherever its workers wrote them.

``--trace-dir`` is expanded on every alive node of the Ray cluster (``$VARS`` and ``~`` as there). Before
``/start_profile`` each node snapshots its directory (a task pinned to it); after ``/stop_profile`` the driver
polls every node for its new files and waits, with :func:`~phaseprof.capture.server.traces.watch_new_traces`,
until the server's world size of rank traces is complete across all nodes. A file visible from several nodes
(shared filesystem: same path, size and head hash) counts once, owned by the first node in node-id order.

Traces on this driver's node are copied into the run directory as without Ray; the others are analysed on their
node (``scale.ray_run.analyze_on_nodes``) and stay there: only their breakdowns travel.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from phaseprof.capture.server.traces import (
    Collected,
    ProfileWindow,
    RankTraces,
    Snapshot,
    check_one_per_rank,
    ends_properly,
    missing_ranks,
    new_files,
    rank_from_name,
    snapshot,
    watch_new_traces,
)
from phaseprof.errors import PhaseprofError
from phaseprof.scale.rank_task import RankResult, analyze_rank
from phaseprof.scale.ray_run import (
    NodeFile,
    analyze_on_nodes,
    distinct_files,
    expand_path,
    file_identity,
    on_every_node,
    on_nodes,
    this_node,
)



@dataclass(frozen=True)
class NodeDir:
    """One node's view of the trace directory: its path there and its trace files before ``/start_profile``."""

    node_id: str
    host: str
    directory: str
    before: Snapshot


def _snapshot_here(trace_dir: str) -> tuple[str, str, Snapshot | None]:
    """Runs on a node: host, the directory as expanded there, its snapshot (None: no such directory)."""
    d = Path(expand_path(trace_dir)).absolute()
    return socket.gethostname(), str(d), snapshot(d) if d.is_dir() else None


def snapshot_cluster(trace_dir: str) -> list[NodeDir]:
    """Snapshot ``trace_dir`` on every alive node; the nodes where it is a directory, in node-id order."""
    nodes = on_every_node(_snapshot_here, trace_dir)
    found = [NodeDir(n, host, d, snap) for n, (host, d, snap) in nodes if snap is not None]
    if not found:
        raise PhaseprofError(f"trace directory not found on any of the Ray cluster's {len(nodes)} node(s) (give "
                             "the server's torch_profiler_dir to --trace-dir; $VARS expand on each node)",
                             path=trace_dir)
    return found


def _new_here(directory: str, before: Snapshot) -> list[tuple[str, int, str]]:
    """Runs on a node: its new or rewritten trace files, as :func:`~phaseprof.scale.ray_run.file_identity`."""
    out = []
    for path in new_files(Path(directory), before):
        try:
            out.append(file_identity(str(path)))
        except FileNotFoundError:  # removed since it was listed
            continue
    return out


def _complete_here(paths: list[str]) -> list[str]:
    """Runs on a node: the given files that end properly there."""
    return [p for p in paths if ends_properly(Path(p))]


@dataclass(frozen=True)
class ClusterCollected:
    """New rank traces across the cluster: ``collected`` names them (paths as on their nodes) for run.json
    and the headline; ``where[i]`` is the node holding ``collected.files[i]``."""

    collected: Collected
    where: tuple[NodeFile, ...]


def wait_on_cluster(nodes: list[NodeDir], *, expected: int | None, timeout_s: float, stable_s: float = 1.0,
                    poll_s: float = 0.25, window: ProfileWindow | None = None,
                    on_wait: Callable[[str], None] | None = None) -> ClusterCollected:
    """Wait until the new traces (of ``window`` only, when given) on all ``nodes`` are complete (``expected``
    rank files in all, when known). Raises one clear error when no node got a new trace, or none completed, in
    time, or when one rank has several."""
    owner: dict[tuple[str, str], NodeFile] = {}

    def list_new() -> dict[tuple[str, str], int]:
        per_node = on_nodes(_new_here, [(n.node_id, (n.directory, n.before)) for n in nodes])
        owner.clear()
        owner.update({(f.node_id, f.path): f for f in distinct_files(
            (n.node_id, n.host, files) for n, files in zip(nodes, per_node))})
        return {k: f.size for k, f in owner.items() if window is None or window.holds(os.path.basename(k[1]))}

    def complete(keys: list[tuple[str, str]]) -> set[tuple[str, str]]:
        by_node: dict[str, list[str]] = {}
        for node, path in keys:
            by_node.setdefault(node, []).append(path)
        calls = sorted(by_node.items())
        ok = on_nodes(_complete_here, [(n, (paths,)) for n, paths in calls])
        return {(n, p) for (n, _), good in zip(calls, ok) for p in good}

    w = watch_new_traces(list_new, complete, lambda k: rank_from_name(os.path.basename(k[1])), expected=expected,
                         timeout_s=timeout_s, stable_s=stable_s, poll_s=poll_s, on_wait=on_wait)
    where_dirs = ", ".join(f"{n.host}:{n.directory}" for n in nodes)
    if w.timed_out and not w.seen:
        raise PhaseprofError(f"no new trace appeared on any of {len(nodes)} node(s) ({where_dirs}) within "
                             f"{timeout_s:g} s after /stop_profile; is this the server's torch_profiler_dir?")
    if w.timed_out and not w.done:
        raise PhaseprofError(f"{w.seen} new trace file(s) appeared on the cluster but none was complete within "
                             f"{timeout_s:g} s (still being written?)")
    done = sorted(w.done, key=lambda k: (os.path.basename(k[1]), k))
    files = tuple(Path(p) for _, p in done)
    collected = Collected(files, tuple(rank_from_name(p.name) for p in files), w.waited_s)
    check_one_per_rank(collected.ranks, [f"{owner[k].host}:{k[1]}" for k in done])
    return ClusterCollected(collected, tuple(owner[k] for k in done))


@dataclass(frozen=True)
class ClusterRanks:
    """Rank traces analysed across the cluster: results per rank (local ones read from the run directory's
    copy), and per rank where its trace is and whether it was copied (run.json ``trace.rank_locations``)."""

    results: dict[int, RankResult]
    locations: list[dict[str, Any]]


def analyze_cluster_ranks(rank_files: list[tuple[int, NodeFile]], *, tmp: Path, final: Path,
                          local_node: str | None = None) -> ClusterRanks:
    """Copy the traces on ``local_node`` (default: this driver's node) into ``tmp/ranks`` and analyse them
    here; analyse every other one on its node, where it stays."""
    local_node = this_node() if local_node is None else local_node
    here = [(r, f) for r, f in rank_files if f.node_id == local_node]
    away = [(r, f) for r, f in rank_files if f.node_id != local_node]
    results: dict[int, RankResult] = {}
    locations: dict[int, dict[str, Any]] = {}
    if here:
        (tmp / "ranks").mkdir(exist_ok=True)
    for r, f in here:
        name = Path(f.path).name
        shutil.copy2(f.path, tmp / "ranks" / name)
        res = analyze_rank(tmp / "ranks" / name)
        final_path = str(final / "ranks" / name)  # the breakdown names where the copy lives once renamed
        results[r] = dataclasses.replace(res, path=final_path, breakdown=res.breakdown.naming_trace(final_path))
        locations[r] = rank_location(r, f, copied_to=f"ranks/{name}")
    for (r, f), res in zip(away, analyze_on_nodes([f for _, f in away])):
        results[r] = res
        locations[r] = rank_location(r, f, copied_to=None)
    return ClusterRanks(dict(sorted(results.items())), [locations[r] for r in sorted(locations)])


def rank_location(rank: int, f: NodeFile, *, copied_to: str | None) -> dict[str, Any]:
    """One entry of run.json's ``trace.rank_locations``: where the rank's trace is, and its copy in the run
    directory (None: it stayed on its node)."""
    return {"rank": rank, "node_id": f.node_id, "host": f.host, "path": f.path, "size": f.size,
            "copied_to": copied_to, "stayed_on_node": copied_to is None}


def missing_on_cluster_message(missing: list[int], world_size: int, trace_dir: str, n_nodes: int) -> str:
    """What to tell the user when some ranks have a new trace on no node of the cluster."""
    return (f"{trace_dir}: rank(s) {', '.join(map(str, missing))} of {world_size} have no new trace on any of the "
            f"Ray cluster's {n_nodes} node(s) with that directory (a node outside the cluster, or its directory "
            f"is elsewhere); the breakdowns cover {world_size - len(missing)} of {world_size} ranks")


def write_cluster_rank_traces(tmp: Path, final: Path, rank_files: list[tuple[int, NodeFile]], *,
                              world_size: int | None, trace_dir: str, nodes: list[NodeDir]) -> RankTraces:
    """The run directory's rank part when traces sit on several nodes: ``ranks/`` (this node's traces, copied),
    ``rank<N>.breakdown.json`` for every rank wherever analysed, ``multirank.json`` (the report ``phaseprof
    analyze`` gives for the same files); the ``trace`` entry of run.json records where each rank's trace is."""
    from phaseprof.scale.ranks import summarize_ranks  # noqa: PLC0415
    from phaseprof.scale.report import write_rank_outputs  # noqa: PLC0415

    warnings: list[str] = []
    err = None
    breakdowns: dict[int, Any] = {}
    try:
        ranks = analyze_cluster_ranks(rank_files, tmp=tmp, final=final)
        summary = summarize_ranks(list(ranks.results.values()))
    except PhaseprofError as e:
        ranks, summary, err = None, None, f"analysis failed: {e}"
    if summary is not None:
        breakdowns = dict(summary.ranks)
        write_rank_outputs(summary, tmp)
    world = world_size or (summary.world_size if summary else None)
    local = [loc["copied_to"] for loc in (ranks.locations if ranks else []) if loc["copied_to"]]
    trace_doc: dict[str, Any] = {
        "ranks_dir": "ranks" if local else None, "files": sorted(Path(p).name for p in local),
        "multirank": "multirank.json" if summary is not None else None,
        "ray": {"trace_dir": trace_dir, "nodes": [{"node_id": n.node_id, "host": n.host, "directory": n.directory}
                                                  for n in nodes]},
        "rank_locations": ranks.locations if ranks else [rank_location(r, f, copied_to=None) for r, f in rank_files]}
    lost = missing_ranks([r for r, _ in rank_files], world)
    if lost:
        warnings.append(missing_on_cluster_message(lost, int(world or 0), trace_dir, len(nodes)))
    return RankTraces(breakdowns, err, trace_doc, tuple(warnings), summary)
