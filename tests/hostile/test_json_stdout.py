"""``analyze -f json`` prints one JSON document: ``analyze A B -f json`` printed two documents
back to back, which no JSON reader accepts. One input prints its document; several print one array of them, in
the order given (multi-rank reports of rank folders first), documented in README.md. Also: concurrent users of
one ``--json`` destination each leave a whole, valid breakdown (atomic replace), never a torn or temp file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from phaseprof.commands.main import main

from ..conftest import REPO

CPU = REPO / "traces/cpu/tiny-hybrid-prefill128-decode8/trace.json.gz"
PUBLIC = REPO / "traces/public-cut/mi300x_sglang_qwen3_8b_decode.json.gz"


def test_two_traces_print_one_array(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(CPU), str(PUBLIC), "-f", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)  # one document: a second one would be "Extra data"
    assert isinstance(doc, list) and len(doc) == 2
    assert [Path(d["trace"]["path"]).name for d in doc] == [CPU.name, PUBLIC.name]


def test_one_trace_prints_its_object(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(CPU), "-f", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert isinstance(doc, dict) and doc["schema_version"]


def test_failure_on_the_second_trace_prints_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": []}')
    assert main(["analyze", str(CPU), str(bad), "-f", "json"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1


def test_concurrent_json_users_leave_a_whole_breakdown(tmp_path: Path) -> None:
    dest = tmp_path / "shared.json"
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    procs = [subprocess.Popen([sys.executable, "-m", "phaseprof.commands.main", "analyze", str(t), "--json", str(dest),
                               "-f", "json"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for t in (CPU, PUBLIC)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [e.decode()[-300:] for _, e in outs]
    written = json.loads(dest.read_bytes())
    assert Path(written["trace"]["path"]).name in {CPU.name, PUBLIC.name}
    assert [p.name for p in tmp_path.iterdir()] == ["shared.json"]  # no temp file left by any writer
    for out, _ in outs:
        assert isinstance(json.loads(out), dict)
