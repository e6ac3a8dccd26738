"""Rank folders. A folder with rank 5 and rank -1 of a world of 2 exited 0 and said
it "covers 2 of 2 ranks" while ranks 0 and 1 had no trace; ``-j 10000`` on a folder of small rank files started
a process per file. Ranks outside [0, world_size), duplicates and non-integer ranks are one-line errors; the
coverage line counts only real ranks; ``--jobs`` is clamped to the cores and the files, and says so.

The folders are the real CPU capture copied with its ``distributedInfo`` rewritten; the generated cases run
``summarize_ranks`` on one analysed rank whose recorded (rank, world_size) is replaced, so hundreds of folders
cost one analysis."""

from __future__ import annotations

import dataclasses
import gzip
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phaseprof.scale.ranks import summarize_ranks
from phaseprof.commands.main import main
from phaseprof.errors import PhaseprofError
from phaseprof.scale.local import clamp_jobs, default_jobs
from phaseprof.scale.rank_task import RankResult, analyze_rank
from tests.hostile.helpers import one_line_error

from ..conftest import REPO

TRACE = REPO / "traces/cpu/tiny-hybrid-prefill128-decode8/trace.json.gz"


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    with gzip.open(TRACE, "rb") as f:
        return json.load(f)


def _folder(tmp_path: Path, doc: dict[str, Any], dists: list[Any]) -> Path:
    d = tmp_path / "ranks"
    d.mkdir()
    for i, dist in enumerate(dists):
        (d / f"rank{i}.pt.trace.json").write_text(json.dumps(dict(doc, distributedInfo=dist)))
    return d


def test_ranks_outside_the_world_are_refused(doc: dict[str, Any], tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    d = _folder(tmp_path, doc, [{"rank": 5, "world_size": 2}, {"rank": -1, "world_size": 2}])
    line = one_line_error(["analyze", str(d), "-j", "1"], capsys, "outside [0, world_size 2)")
    assert "rank 5" in line or "rank -1" in line


def test_partial_folder_says_what_it_covers(doc: dict[str, Any], tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    d = _folder(tmp_path, doc, [{"rank": 0, "world_size": 4}, {"rank": 2, "world_size": 4}])
    assert main(["analyze", str(d), "-j", "1", "-f", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert any("rank(s) [1, 3] have no trace" in w and "covers 2 of 4 ranks" in w for w in report["warnings"]), \
        report["warnings"]


@pytest.fixture(scope="module")
def one_rank() -> RankResult:
    return analyze_rank(TRACE)


def _as(res: RankResult, rank: Any, world: Any, i: int) -> RankResult:
    trace = dataclasses.replace(res.breakdown.trace, distributed={"rank": rank, "world_size": world})
    return dataclasses.replace(res, path=f"/x/rank{i}.json", breakdown=dataclasses.replace(res.breakdown, trace=trace))


@pytest.mark.parametrize("dists, words", [
    ([(0, 2), (0, 2)], ("rank 0 appears twice",)),
    ([("0", 2), (1, 2)], ("not whole numbers",)),
    ([(0, 0), (1, 0)], ("outside [0, world_size 0)",)),
    ([(True, 2), (1, 2)], ("not whole numbers",)),
    ([(2**70, 2), (1, 2)], ("outside [0, world_size 2)",)),
    ([(1, 2**62), (0, 2**62)], ("world_size 4611686018427387904 is over 65,536 ranks",)),
])
def test_bad_rank_records(dists: list[tuple[Any, Any]], words: tuple[str, ...], one_rank: RankResult) -> None:
    with pytest.raises(PhaseprofError) as e:
        summarize_ranks([_as(one_rank, r, w, i) for i, (r, w) in enumerate(dists)])
    assert all(w in str(e.value) for w in words), str(e.value)


_value = st.one_of(st.integers(-3, 6), st.sampled_from([2**70, -(2**70), 1.0, 1.5, "1", None, True, [1]]))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pairs=st.lists(st.tuples(_value, _value), min_size=1, max_size=5))
def test_generated_rank_folders(one_rank: RankResult, pairs: list[tuple[Any, Any]]) -> None:
    """Whatever the files record: a clear error, or a summary whose ranks are distinct members of the world and
    whose coverage warning names exactly the ranks without a trace."""
    results = [_as(one_rank, r, w, i) for i, (r, w) in enumerate(pairs)]
    try:
        s = summarize_ranks(results)
    except PhaseprofError as e:
        assert "\n" not in str(e)
        return
    assert all(0 <= r < s.world_size for r in s.ranks) and len(s.ranks) == len(pairs)
    missing = sorted(set(range(s.world_size)) - set(s.ranks))
    said = [w for w in s.warnings if "covers" in w]
    if missing:
        assert len(said) == 1 and f"covers {len(s.ranks)} of {s.world_size} ranks" in said[0]
        assert re.search(re.escape(str(missing)), said[0])
    else:
        assert not said


def test_jobs_clamped_to_cores_and_files(doc: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert clamp_jobs(10_000, 200) == min(default_jobs(), 200)
    assert clamp_jobs(10_000, 1) == 1 and clamp_jobs(None, 3) == min(default_jobs(), 3)
    assert clamp_jobs(0, 5) >= 1
    # A machine with one usable core: the run stays in this process (no worker spawned) and says why.
    monkeypatch.setattr("phaseprof.scale.workers.default_jobs", lambda: 1)
    monkeypatch.setattr("phaseprof.commands.scale.default_jobs", lambda: 1)
    d = _folder(tmp_path, doc, [{"rank": 0, "world_size": 2}, {"rank": 1, "world_size": 2}])
    assert main(["analyze", str(d), "-j", "10000", "-f", "json"]) == 0
    out, err = capsys.readouterr()
    json.loads(out)  # the note goes to stderr: stdout stays one JSON document
    assert "--jobs 10000 clamped to 1 (1 usable core(s), 2 rank file(s))" in " ".join(err.split())
