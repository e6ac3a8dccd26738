"""Rank files in worker processes: same report whatever --jobs, errors from workers keep their file and exit code."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jsonschema
import msgspec
import orjson

from phaseprof.scale.ranks import analyze_ranks, find_trace_files
from phaseprof.commands.main import main
from phaseprof.scale.report import SCHEMA_PATH, MultiRankReport, build_report, dumps, json_schema

ROOT = Path(__file__).resolve().parents[2]
TP2 = ROOT / "traces/h200x2/tp2-eager-prefill4096-decode8"


def test_jobs_do_not_change_the_report():
    files = find_trace_files(TP2)
    one = dumps(build_report(analyze_ranks(files, jobs=1)))
    two = dumps(build_report(analyze_ranks(list(reversed(files)), jobs=2)))
    assert one == two
    doc = orjson.loads(two)
    jsonschema.validate(doc, json_schema())
    assert doc["kind"] == "multi-rank" and [r["rank"] for r in doc["ranks"]] == [0, 1]
    back = msgspec.convert(orjson.loads(two), MultiRankReport, strict=False)
    assert back.collectives.late_count_by_rank[1] > 0  # int rank keys survive the round trip


def test_committed_schema_is_current():
    assert json.loads(SCHEMA_PATH.read_text()) == json_schema()


def test_cli_json_for_a_rank_directory(tmp_path, capsys):
    out = tmp_path / "out"
    rc = main(["analyze", str(TP2), "--format", "json", "--json", str(out), "--jobs", "2"])
    assert rc in (0, None)
    doc = json.loads(capsys.readouterr().out)
    assert doc["world_size"] == 2 and doc["collectives"]["matched_instances"] > 0
    assert sorted(p.name for p in out.iterdir()) == ["multirank.json", "rank0.breakdown.json",
                                                      "rank1.breakdown.json"]
    assert json.loads((out / "multirank.json").read_text()) == doc


def test_a_broken_rank_file_names_itself_from_a_worker(tmp_path, capsys):
    for f in find_trace_files(TP2):
        shutil.copy(f, tmp_path)
    (tmp_path / "rank2.pt.trace.json.gz").write_bytes(b"\x1f\x8b not really gzip")
    rc = main(["analyze", str(tmp_path), "--jobs", "2"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "rank2.pt.trace.json.gz" in err and "Traceback" not in err
