"""``capture --server --ray`` on a real local two-node Ray cluster (127.0.0.1): the same ``--trace-dir``
(``$PHASEPROF_NODE_TRACES``) is a different, private directory on each node (tests/scale/ray_cluster.py). The
rank traces are real ones (TP2 + EP ``vllm serve`` on two H200s, decode step 1 of each rank) written under the
names vLLM gave them; files already there before the snapshot are ignored, each rank is analysed once, on the
node that holds it, and its breakdown is the one a local analysis of the same file gives."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="the ray extra is installed by scripts/install.sh; CI has it")

from rich.console import Console  # noqa: E402

from phaseprof.capture.server.capture import ServerCapture, ServerTarget, capture_from_server  # noqa: E402
from phaseprof.capture.server.ray_nodes import (  # noqa: E402
    analyze_cluster_ranks,
    snapshot_cluster,
    wait_on_cluster,
)
from phaseprof.capture.shared.options import CaptureOptions, Phase  # noqa: E402
from phaseprof.errors import PhaseprofError  # noqa: E402
from phaseprof.report.json_io import dumps  # noqa: E402
from phaseprof.scale.rank_task import analyze_rank  # noqa: E402
from phaseprof.scale.ray_run import this_node  # noqa: E402
from tests.capture.test_server_errors import Stub, _json, stub, vllm_like  # noqa: E402, F401 (stub: fixture)
from tests.capture.test_server_traces import fresh_name  # noqa: E402
from tests.scale.ray_cluster import NODE_VAR, two_node_cluster  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
STEP1 = REPO / "traces/h200x2/server-tp2-ep/decode-step1"
SRC = {0: STEP1 / "dp0_pp0_tp0_dcp0_ep0_rank0.step1.pt.trace.json.gz",
       1: STEP1 / "dp0_pp0_tp1_dcp0_ep1_rank1.step1.pt.trace.json.gz"}
# the names vLLM gave these ranks' traces (traces/h200x2/server-tp2-ep/decode-4096in-32out/run.json)
NAMES = {0: "dp0_pp0_tp0_dcp0_ep0_rank0.1796085271416179758.pt.trace.json.gz",
         1: "dp0_pp0_tp1_dcp0_ep1_rank1.1796085272443677399.pt.trace.json.gz"}
TRACE_DIR = f"${NODE_VAR}"
OLD = "dp0_pp0_tp1_dcp0_ep1_rank1.1796085200000000000.pt.trace.json.gz"  # an earlier profile's trace


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[int, str], dict[str, Path], str]]:
    """Rank r's node id (rank 0 on the head, where this driver runs; rank 1 on the worker), each node's
    directory, the cluster's address."""
    head, worker = tmp_path_factory.mktemp("head-traces"), tmp_path_factory.mktemp("worker-traces")
    with two_node_cluster(head, worker) as (c, dirs):
        node_of_rank = {0: next(n for n, d in dirs.items() if d == head),
                        1: next(n for n, d in dirs.items() if d == worker)}
        yield node_of_rank, dirs, c.address


def _clear(dirs: dict[str, Path]) -> None:
    for d in dirs.values():
        for p in d.iterdir():
            p.unlink()


def _write_ranks(node_of_rank: dict[int, str], dirs: dict[str, Path], names: dict[int, str] = NAMES) -> None:
    """What the server's workers do after /stop_profile: each rank writes its trace on its own node."""
    for r, node in node_of_rank.items():
        shutil.copy(SRC[r], dirs[node] / names[r])


def _bd_without_path(bd: object) -> dict:
    """A breakdown as written to JSON, less the trace's path (the same file sits at another path here)."""
    doc = json.loads(bd) if isinstance(bd, bytes) else json.loads(dumps(bd))
    doc["trace"].pop("path")
    return doc


def test_new_traces_found_per_node_and_analysed_where_they_are(cluster, tmp_path: Path) -> None:
    node_of_rank, dirs, _address = cluster
    _clear(dirs)
    worker_dir = dirs[node_of_rank[1]]
    shutil.copy(SRC[1], worker_dir / OLD)  # there before /start_profile: never taken
    nodes = snapshot_cluster(TRACE_DIR)
    assert {n.node_id: Path(n.directory) for n in nodes} == dirs  # one path string, a private directory per node
    _write_ranks(node_of_rank, dirs)
    got = wait_on_cluster(nodes, expected=2, timeout_s=60, stable_s=0.2, poll_s=0.05)
    assert got.collected.ranks == (0, 1) and [p.name for p in got.collected.files] == [NAMES[0], NAMES[1]]
    assert [f.node_id for f in got.where] == [node_of_rank[0], node_of_rank[1]]
    assert [Path(f.path) for f in got.where] == [dirs[node_of_rank[r]] / NAMES[r] for r in (0, 1)]

    assert this_node() == node_of_rank[0]  # the driver runs on the head: rank 0 is local, rank 1 is not
    tmp, final = tmp_path / "tmp", tmp_path / "final"
    tmp.mkdir()
    ranks = analyze_cluster_ranks(list(zip(got.collected.ranks, got.where)), tmp=tmp, final=final)
    assert sorted(ranks.results) == [0, 1]  # every rank once
    assert ranks.results[0].pid == os.getpid()  # the local copy, analysed here
    assert ranks.results[1].pid != os.getpid()  # a task on the worker node (ray_run checks the node id)
    assert [p.name for p in (tmp / "ranks").iterdir()] == [NAMES[0]]  # only the local trace was copied
    assert ranks.results[0].path == str(final / "ranks" / NAMES[0])
    assert ranks.results[1].path == str(worker_dir / NAMES[1])
    for r in (0, 1):
        assert _bd_without_path(ranks.results[r].breakdown) == _bd_without_path(analyze_rank(SRC[r]).breakdown)
    assert ranks.locations == [
        {"rank": 0, "node_id": node_of_rank[0], "host": got.where[0].host, "path": got.where[0].path,
         "size": SRC[0].stat().st_size, "copied_to": f"ranks/{NAMES[0]}", "stayed_on_node": False},
        {"rank": 1, "node_id": node_of_rank[1], "host": got.where[1].host, "path": str(worker_dir / NAMES[1]),
         "size": SRC[1].stat().st_size, "copied_to": None, "stayed_on_node": True}]


def test_no_new_trace_on_any_node_is_one_clear_error(cluster) -> None:
    _node_of_rank, dirs, _address = cluster
    _clear(dirs)
    nodes = snapshot_cluster(TRACE_DIR)
    with pytest.raises(PhaseprofError, match=r"no new trace appeared on any of 2 node\(s\) .* within 1 s after "
                                             r"/stop_profile"):
        wait_on_cluster(nodes, expected=2, timeout_s=1, stable_s=0.2, poll_s=0.05)
    with pytest.raises(PhaseprofError, match=r"trace directory not found on any of the Ray cluster's 2 node\(s\)"):
        snapshot_cluster("$PHASEPROF_NO_SUCH_VAR/traces")


def test_capture_from_server_end_to_end(cluster, stub: Stub, tmp_path: Path) -> None:
    node_of_rank, dirs, address = cluster
    _clear(dirs)
    shutil.copy(SRC[1], dirs[node_of_rank[1]] / OLD)

    names: dict[int, str] = {}

    def stop() -> tuple[int, bytes]:  # stamped now, as torch's trace handler does while /stop_profile runs
        names.update({r: fresh_name(n) for r, n in NAMES.items()})
        _write_ranks(node_of_rank, dirs, names)
        return 200, b""

    stub.routes = vllm_like(["/start_profile", "/stop_profile"], **{
        "POST /start_profile": (200, b""), "POST /stop_profile": stop,
        "GET /server_info": _json({"vllm_config": {"parallel_config": {"tensor_parallel_size": 2},
                                                   "model_config": {"enforce_eager": True}}})})
    req = ServerCapture(capture=CaptureOptions(phase=Phase.PREFILL, prompt_tokens=16, reps=1, warmup=0, out=tmp_path),
                        server=ServerTarget(stub.url), trace_dir=Path(TRACE_DIR), trace_wait_s=60.0,
                        ray=address)
    res = capture_from_server(req, console=Console(quiet=True))
    assert res.warnings == () and res.breakdown_error is None and sorted(res.breakdowns) == [0, 1]
    assert {p.name for p in res.run_dir.iterdir()} == {"ranks", "rank0.breakdown.json", "rank1.breakdown.json",
                                                       "multirank.json", "run.json"}
    assert [p.name for p in (res.run_dir / "ranks").iterdir()] == [names[0]]
    for r in (0, 1):
        written = (res.run_dir / f"rank{r}.breakdown.json").read_bytes()
        assert _bd_without_path(written) == _bd_without_path(analyze_rank(SRC[r]).breakdown)
    run = json.loads((res.run_dir / "run.json").read_text())
    locs = run["trace"]["rank_locations"]
    assert [(x["rank"], x["node_id"], x["stayed_on_node"]) for x in locs] == [
        (0, node_of_rank[0], False), (1, node_of_rank[1], True)]
    assert locs[1]["path"] == str(dirs[node_of_rank[1]] / names[1])
    assert run["profile"]["rank_traces"] == [names[0], names[1]] and run["rank_breakdowns"] == [
        "rank0.breakdown.json", "rank1.breakdown.json"]
    multi = json.loads((res.run_dir / "multirank.json").read_text())
    assert multi["world_size"] == 2 and [x["rank"] for x in multi["ranks"]] == [0, 1]
    assert multi["collectives"] is not None


def test_a_shared_directory_counts_each_file_once(cluster, tmp_path: Path) -> None:
    """Both nodes see one directory (a shared filesystem): every file is found by both, taken once."""
    _node_of_rank, dirs, _address = cluster
    shared = tmp_path / "shared"
    shared.mkdir()
    nodes = snapshot_cluster(str(shared))
    assert [Path(n.directory) for n in nodes] == [shared, shared]
    for r in (0, 1):
        shutil.copy(SRC[r], shared / NAMES[r])
    got = wait_on_cluster(nodes, expected=2, timeout_s=60, stable_s=0.2, poll_s=0.05)
    assert got.collected.ranks == (0, 1)
    assert [f.node_id for f in got.where] == [min(dirs)] * 2  # owned by the first node in node-id order
