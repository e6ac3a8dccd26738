"""``--json`` destinations that cannot be written and ``diff`` inputs that cannot be read: one line, exit 2,
nothing half-written; a written breakdown gets the usual umask permissions (mkstemp's 0600 leaked before)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from phaseprof.commands.main import main
from tests.hostile.helpers import one_line_error

from ..conftest import REPO

RUN = REPO / "traces/h200/graph/20261130T094740Z-h200-qwen3.5-35b-a3b-prefill-4096"
TRACE = REPO / "traces/cpu/tiny-hybrid-prefill128-decode8/trace.json.gz"


def _unwritable_dir(tmp_path: Path) -> Path:
    if os.geteuid() == 0:  # root writes through permission bits; /proc refuses new files even to root
        return Path("/proc")
    d = tmp_path / "ro"
    d.mkdir(mode=0o500)
    return d


def _unreadable_file(tmp_path: Path) -> Path:
    if os.geteuid() == 0:  # a regular file whose read fails (EIO) even for root
        return Path("/proc/self/mem")
    p = tmp_path / "secret.breakdown.json"
    p.write_text('{"schema_version": "1.0"}')
    p.chmod(0)
    return p


def test_json_under_a_regular_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "file").write_text("x")
    dest = tmp_path / "file" / "out.json"
    one_line_error(["analyze", str(TRACE), "--json", str(dest)], capsys, str(dest), "cannot write")


def test_json_onto_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dest = tmp_path / "out.json"
    dest.mkdir()
    one_line_error(["analyze", str(TRACE), "--json", str(dest)], capsys, str(dest), "is a directory")
    assert list(dest.iterdir()) == []


def test_json_into_an_unwritable_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dest = _unwritable_dir(tmp_path) / "out.json"
    one_line_error(["analyze", str(TRACE), "--json", str(dest)], capsys, str(dest), "cannot write")


def test_json_gets_umask_permissions(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        assert main(["analyze", str(TRACE), "--json", str(tmp_path / "bd.json"), "-f", "json"]) == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "bd.json").stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["bd.json"]  # no temp file left behind


def test_diff_unreadable_breakdown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = _unreadable_file(tmp_path)
    one_line_error(["diff", str(RUN / "breakdown.json"), str(bad)], capsys, str(bad), "cannot read")


def test_diff_fifo(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    os.mkfifo(tmp_path / "b.json")
    one_line_error(["diff", str(RUN / "breakdown.json"), str(tmp_path / "b.json")], capsys, "b.json",
              "not a regular file")


@pytest.mark.parametrize("version", ["1.9", "2.0", "1", 1.0, None, ["1.0"], "1.0.0", "0.9x"])
def test_diff_unknown_schema_version(version: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = json.loads((RUN / "breakdown.json").read_text())
    doc["schema_version"] = version
    p = tmp_path / "newer.breakdown.json"
    p.write_text(json.dumps(doc))
    one_line_error(["diff", str(RUN / "breakdown.json"), str(p)], capsys, p.name, "schema")


def test_diff_known_schema_still_reads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diff", str(RUN / "breakdown.json"), str(RUN / "breakdown.json"), "-f", "json"]) == 0
