"""A real local multi-node Ray cluster (127.0.0.1) for tests: the head node and one worker, each seeing its own
directory through ``$PHASEPROF_NODE_TRACES`` (set for that node's raylet and its workers only) — the way rank
traces sit on the local disks of a multi-node vLLM deployment."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import ray
from ray.cluster_utils import Cluster

NODE_VAR = "PHASEPROF_NODE_TRACES"


@contextmanager
def two_node_cluster(head_dir: Path, worker_dir: Path) -> Iterator[tuple[Cluster, dict[str, Path]]]:
    """The cluster, this driver connected to it, and each node's directory by node id (head first)."""
    # Ray waits a fixed 30 s for a new raylet to register (ray/_private/node.py, not configurable); on a loaded
    # 2-core machine that can pass, so a cluster that fails to *start* is retried. What is tested comes after.
    for attempt in range(3):
        c = None
        try:
            c = Cluster(initialize_head=True, head_node_args={
                "num_cpus": 1, "include_dashboard": False, "env_vars": {NODE_VAR: str(head_dir)}})
            worker = c.add_node(num_cpus=1, env_vars={NODE_VAR: str(worker_dir)})
            c.wait_for_nodes()
            break
        except Exception:
            if c is not None:
                c.shutdown()
            if attempt == 2:
                raise
    try:
        ray.init(address=c.address, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
        yield c, {c.head_node.node_id: head_dir, worker.node_id: worker_dir}
    finally:
        ray.shutdown()
        c.shutdown()
