"""Rank files analysed on a Ray cluster, each on the node whose filesystem holds it (``--ray``).

Multi-node vLLM writes every rank's trace on the node where that rank ran. The glob is expanded on every alive
node (environment variables and ``~`` expanded there too); each distinct file is analysed by one task pinned to a
node that sees it, and only the :class:`RankResult` comes back: trace files never travel. A file visible from
several nodes (shared filesystem) is analysed once, on the first such node in node-id order.
"""

from __future__ import annotations

import glob
import hashlib
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from phaseprof.errors import EnvironmentProblem, PhaseprofError
from phaseprof.scale.rank_task import RankResult, analyze_rank

_HEAD_BYTES = 1 << 16  # identity of a file across nodes: path, size and a hash of its first 64 KiB


@dataclass(frozen=True)
class NodeFile:
    node_id: str
    host: str
    path: str
    size: int
    head_sha256: str


def _expand_here(pattern: str) -> tuple[str, list[tuple[str, int, str]]]:
    """Runs on a node: the files ``pattern`` matches there, with size and head hash."""
    out = []
    for p in sorted(glob.glob(os.path.expanduser(os.path.expandvars(pattern)))):
        if not os.path.isfile(p):
            continue
        with open(p, "rb") as f:
            head = hashlib.sha256(f.read(_HEAD_BYTES)).hexdigest()
        out.append((os.path.abspath(p), os.path.getsize(p), head))
    return socket.gethostname(), out


def _analyze_on_node(path: str, rules: list[str] | None) -> tuple[str, RankResult]:
    """Runs as a Ray task: the node it ran on, and the rank's result."""
    import ray

    return ray.get_runtime_context().get_node_id(), analyze_rank(path, rules)


def _ray():
    try:
        import ray
    except ImportError:
        raise EnvironmentProblem("--ray needs Ray: pip install 'phaseprof[ray]'") from None
    return ray


def connect(address: str | None) -> None:
    """Join the cluster at ``address`` (``auto``: the one this machine belongs to), or start a local one."""
    ray = _ray()
    if ray.is_initialized():
        return
    try:
        ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    except ConnectionError as e:
        raise EnvironmentProblem(f"cannot reach the Ray cluster at {address!r}: {e}") from None


def find_files(pattern: str) -> list[NodeFile]:
    """Expand ``pattern`` on every alive node; one entry per distinct file, owned by one node."""
    ray = _ray()
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    expand = ray.remote(num_cpus=0)(_expand_here)
    nodes = sorted(n["NodeID"] for n in ray.nodes() if n.get("Alive"))
    refs = [expand.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n, soft=False)).remote(pattern)
            for n in nodes]
    seen: dict[tuple[str, int, str], NodeFile] = {}
    for node, (host, files) in zip(nodes, ray.get(refs)):
        for path, size, head in files:
            seen.setdefault((path, size, head), NodeFile(node, host, path, size, head))
    return sorted(seen.values(), key=lambda f: (f.path, f.node_id))


def analyze_on_cluster(pattern: str, *, address: str | None = None, rule_files: list[Path] | None = None,
                       on_done: Callable[[NodeFile], None] | None = None) -> tuple[list[NodeFile], list[RankResult]]:
    """Analyse every file the glob matches on any node, each on its node. Results in file order; raises if a
    task ran anywhere but on the node that holds its file."""
    connect(address)
    ray = _ray()
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    files = find_files(pattern)
    if not files:
        raise PhaseprofError(f"no file matches {pattern!r} on any of the cluster's nodes")
    rules = [str(r) for r in rule_files] if rule_files else None
    task = ray.remote(num_cpus=1, max_retries=0)(_analyze_on_node)
    refs = [task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(f.node_id, soft=False))
            .remote(f.path, rules) for f in files]
    results: list[RankResult] = []
    for f, ref in zip(files, refs):
        try:
            ran_on, res = ray.get(ref)
        except ray.exceptions.RayTaskError as e:
            cause = getattr(e, "cause", None)
            if isinstance(cause, PhaseprofError):
                raise cause from None
            raise
        if ran_on != f.node_id:  # hard affinity makes this impossible; checked because files must never travel
            raise PhaseprofError(f"task for {f.path} ran on node {ran_on}, not on {f.node_id} which holds it",
                                 exit_code=1)
        results.append(res)
        if on_done:
            on_done(f)
    return files, results
