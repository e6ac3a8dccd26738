"""--ray on a real local multi-node Ray cluster (127.0.0.1): every rank file is analysed once, by a task on the
node that holds it, and the report is the one the local run gives.

Each node sees its own trace directory through ``$PHASEPROF_NODE_TRACES`` (tests/scale/ray_cluster.py); the glob
names that variable, so it expands to a different directory on each node — the way rank traces sit on the local
disks of a multi-node vLLM deployment.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="the ray extra is installed by scripts/install.sh; CI has it")

from phaseprof.scale.ranks import analyze_ranks, find_trace_files  # noqa: E402
from phaseprof.scale.ranks import summarize_ranks  # noqa: E402
from phaseprof.scale.ray_run import analyze_on_cluster  # noqa: E402
from phaseprof.scale.report import build_report, dumps  # noqa: E402
from tests.scale.ray_cluster import two_node_cluster  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TP2 = ROOT / "traces/h200x2/tp2-eager-prefill4096-decode8"
PATTERN = "$PHASEPROF_NODE_TRACES/*.pt.trace.json.gz"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Two nodes (the head and one worker), one rank file each, each node's directory known only to it."""
    files = find_trace_files(TP2)
    dirs = [tmp_path_factory.mktemp(f"node{i}") for i in range(len(files))]
    for f, d in zip(files, dirs):
        shutil.copy(f, d)
    with two_node_cluster(dirs[0], dirs[1]) as running:
        yield running


def test_each_rank_analysed_on_its_node_and_report_equals_local(cluster):
    _c, dir_of_node = cluster
    files, results = analyze_on_cluster(PATTERN)
    assert len(files) == 2 and len(results) == 2  # each file once, though both nodes run the same glob
    for f in files:
        assert Path(f.path).parent == dir_of_node[f.node_id]  # the file lives on the node that analysed it
    local = analyze_ranks([Path(f.path) for f in files], jobs=1)
    assert dumps(build_report(summarize_ranks(results))) == dumps(build_report(local))


def test_a_glob_matching_nothing_anywhere_is_one_clear_error(cluster):
    from phaseprof.errors import PhaseprofError

    with pytest.raises(PhaseprofError, match="no file matches"):
        analyze_on_cluster("$PHASEPROF_NODE_TRACES/*.nothing")


def test_cli_ray_prints_the_same_report_as_the_local_run(cluster, capsys):
    import json

    from phaseprof.commands.main import main

    c, dir_of_node = cluster
    assert main(["analyze", "--ray", c.address, PATTERN, "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert sorted(Path(r["path"]).parent for r in doc["ranks"]) == sorted(dir_of_node.values())
    local = [Path(r["path"]) for r in doc["ranks"]]
    assert doc == json.loads(dumps(build_report(analyze_ranks(local, jobs=1))))
