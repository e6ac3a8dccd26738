"""Rank files analysed on a Ray cluster, each on the node whose filesystem holds it (``--ray``).

Multi-node vLLM writes every rank's trace on the node where that rank ran. The glob is expanded on every alive
node (environment variables and ``~`` expanded there too); each distinct file is analysed by one task pinned to a
node that sees it, and only the :class:`RankResult` comes back: trace files never travel. A file visible from
several nodes (shared filesystem) is analysed once, on the first such node in node-id order.

The building blocks (:func:`on_every_node`, :func:`file_identity`, :func:`analyze_on_nodes`) also serve
``capture --server --ray`` (``capture/server/ray_nodes.py``).
"""

from __future__ import annotations

import functools
import glob
import hashlib
import os
import re
import socket
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from phaseprof.errors import EnvironmentProblem, PhaseprofError
from phaseprof.scale.rank_task import RankResult, analyze_rank

_HEAD_BYTES = 1 << 16  # identity of a file across nodes: path, size and a hash of its first 64 KiB
_PROBE_S = 5.0  # how long a HOST:PORT address may take to accept a TCP connection before it counts as unreachable


@dataclass(frozen=True)
class NodeFile:
    node_id: str
    host: str
    path: str
    size: int
    head_sha256: str


def expand_path(pattern: str) -> str:
    """``pattern`` with ``$VARS`` and ``~`` expanded as on the node this runs on."""
    return os.path.expanduser(os.path.expandvars(pattern))


def file_identity(path: str) -> tuple[str, int, str]:
    """(absolute path, size, sha256 of the first 64 KiB): the same file seen from two nodes has the same one."""
    with open(path, "rb") as f:
        head = hashlib.sha256(f.read(_HEAD_BYTES)).hexdigest()
    return os.path.abspath(path), os.path.getsize(path), head


def _expand_here(pattern: str) -> tuple[str, list[tuple[str, int, str]]]:
    """Runs on a node: the files ``pattern`` matches there, with size and head hash."""
    paths = sorted(glob.glob(expand_path(pattern)))
    return socket.gethostname(), [file_identity(p) for p in paths if os.path.isfile(p)]


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


def _check_reachable(address: str) -> None:
    """A HOST:PORT (or ray://HOST:PORT) address must accept a TCP connection: ray.init would otherwise retry
    for minutes before failing."""
    hostport = address.split("://", 1)[-1]
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        return  # 'auto', 'local' or a form Ray resolves itself
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=_PROBE_S).close()
    except OSError as e:
        raise EnvironmentProblem(f"cannot reach the Ray cluster at {address!r}: {e.strerror or e}") from None


#: What ``--ray`` takes: ``auto``, ``local``, or HOST:PORT (``ray://HOST:PORT`` for a Ray client).
_ADDRESS = re.compile(r"(?:auto|local|(?:ray://)?(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):\d{1,5})")


def check_address(address: str) -> None:
    """One PhaseprofError (exit 2) when ``address`` is no Ray address (checked before Ray is imported)."""
    if not _ADDRESS.fullmatch(address) or (":" in address and not 1 <= int(address.rsplit(":", 1)[1]) <= 65535):
        raise PhaseprofError(f"--ray {address[:80]!r}: expected 'auto', 'local' or HOST:PORT of a Ray cluster "
                             "(ray://HOST:PORT for a Ray client)")


def connect(address: str | None) -> None:
    """Join the cluster at ``address`` (``auto``: the one this machine belongs to), or start a local one."""
    if address:
        check_address(address)
    ray = _ray()
    if ray.is_initialized():
        return
    if address:
        _check_reachable(address)
    try:
        ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    except (ConnectionError, ValueError, RuntimeError, TimeoutError) as e:  # Ray's own: one line, not its trace
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
        raise EnvironmentProblem(f"cannot reach the Ray cluster at {address!r}: {first}") from None


def pinned(node_id: str) -> Any:
    """The scheduling strategy that runs a task on ``node_id`` and nowhere else."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node_id, soft=False)


def alive_nodes() -> list[str]:
    """Node ids of the cluster's alive nodes, sorted."""
    return sorted(n["NodeID"] for n in _ray().nodes() if n.get("Alive"))


def this_node() -> str | None:
    """The node this driver runs on (None when it is no node of the cluster)."""
    try:
        return _ray().get_runtime_context().get_node_id()
    except Exception:  # noqa: BLE001 - a Ray client driver has no node
        return None


@functools.lru_cache(maxsize=None)
def _light_task(fn: Callable[..., Any]) -> Any:
    """``fn`` as a Ray remote function reserving no CPU (made once per function: capture polls every node)."""
    return _ray().remote(num_cpus=0, max_retries=0)(fn)


def on_nodes(fn: Callable[..., Any], calls: Sequence[tuple[str, tuple[Any, ...]]]) -> list[Any]:
    """``fn(*args)`` as a light task (no CPU reserved) pinned to each ``(node_id, args)``; results in order."""
    task = _light_task(fn)
    return _ray().get([task.options(scheduling_strategy=pinned(n)).remote(*args) for n, args in calls])


def on_every_node(fn: Callable[..., Any], *args: Any) -> list[tuple[str, Any]]:
    """``fn(*args)`` once on every alive node: ``(node_id, result)`` in node-id order."""
    nodes = alive_nodes()
    return list(zip(nodes, on_nodes(fn, [(n, args) for n in nodes])))


def distinct_files(per_node: Iterable[tuple[str, str, Iterable[tuple[str, int, str]]]]) -> list[NodeFile]:
    """``(node_id, host, file identities)`` per node, in node-id order -> one entry per distinct file (path,
    size, head hash: a shared filesystem shows the same file on several nodes), owned by the first node that
    sees it; sorted by path."""
    seen: dict[tuple[str, int, str], NodeFile] = {}
    for node, host, files in per_node:
        for path, size, head in files:
            seen.setdefault((path, size, head), NodeFile(node, host, path, size, head))
    return sorted(seen.values(), key=lambda f: (f.path, f.node_id))


def find_files(pattern: str) -> list[NodeFile]:
    """Expand ``pattern`` on every alive node; one entry per distinct file, owned by one node."""
    return distinct_files((node, host, files) for node, (host, files) in on_every_node(_expand_here, pattern))


def analyze_on_nodes(files: Sequence[NodeFile], *, rule_files: list[Path] | None = None,
                     on_done: Callable[[NodeFile], None] | None = None) -> list[RankResult]:
    """Analyse each file by a task pinned to its node; results in file order. Raises a task's PhaseprofError
    as is, and an error if a task ran anywhere but on the node that holds its file."""
    ray = _ray()
    rules = [str(r) for r in rule_files] if rule_files else None
    task = ray.remote(num_cpus=1, max_retries=0)(_analyze_on_node)
    refs = [task.options(scheduling_strategy=pinned(f.node_id)).remote(f.path, rules) for f in files]
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
    return results


def analyze_on_cluster(pattern: str, *, address: str | None = None, rule_files: list[Path] | None = None,
                       on_done: Callable[[NodeFile], None] | None = None) -> tuple[list[NodeFile], list[RankResult]]:
    """Analyse every file the glob matches on any node, each on its node. Results in file order."""
    connect(address)
    files = find_files(pattern)
    if not files:
        raise PhaseprofError(f"no file matches {pattern!r} on any of the cluster's nodes")
    return files, analyze_on_nodes(files, rule_files=rule_files, on_done=on_done)
