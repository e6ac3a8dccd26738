"""No output path may resolve to an input: ``analyze t.json --json t.json`` replaced the user's
trace with its breakdown and exited 0. The same file, a hard link and a symlink to it are refused with one line,
exit 2, before anything is analysed, and the input is left byte for byte as it was."""

from __future__ import annotations

import gzip
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.hostile.helpers import one_line_error

from ..conftest import REPO

GZ = REPO / "traces/cpu/tiny-hybrid-prefill128-decode8/trace.json.gz"
RANKS = REPO / "traces/h200x2/tp2-eager-prefill4096-decode8"


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    """The real CPU trace, uncompressed: a ``.json`` name, so ``--json`` takes it as a file, not a directory."""
    p = tmp_path / "t.json"
    with gzip.open(GZ, "rb") as f, p.open("wb") as out:
        shutil.copyfileobj(f, out)
    return p


def _same(p: Path, _tmp: Path) -> Path:
    return p


def _hard(p: Path, tmp: Path) -> Path:
    os.link(p, tmp / "hard.json")
    return tmp / "hard.json"


def _sym(p: Path, tmp: Path) -> Path:
    (tmp / "out").mkdir()
    (tmp / "out" / "sym.json").symlink_to(p)
    return tmp / "out" / "sym.json"


def _relative(p: Path, tmp: Path) -> Path:
    (tmp / "sub").mkdir()
    return tmp / "sub" / ".." / p.name


@pytest.mark.parametrize("alias", [_same, _hard, _sym, _relative], ids=["same", "hardlink", "symlink", "dotdot"])
def test_json_onto_the_trace_is_refused(alias: Callable[[Path, Path], Path], trace: Path, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    before = trace.read_bytes()
    dest = alias(trace, tmp_path)
    line = one_line_error(["analyze", str(trace), "--json", str(dest)], capsys, str(dest), "input")
    assert "refusing to overwrite" in line
    assert trace.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no temp file left


def test_json_onto_the_second_of_two_traces(trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Several traces write into a directory: a directory named as one of the inputs is refused too."""
    before = trace.read_bytes()
    one_line_error(["analyze", str(GZ), str(trace), "--json", str(trace)], capsys, str(trace))
    assert trace.read_bytes() == before


def test_json_onto_the_rules_file(trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rules = tmp_path / "rules.json"  # odd name, but a file the command reads
    rules.write_text("# extra rules: none\n")
    before = rules.read_bytes()
    one_line_error(["analyze", str(trace), "--rules", str(rules), "--json", str(rules)], capsys, str(rules), "input")
    assert rules.read_bytes() == before


def test_rank_outputs_onto_a_rank_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A rank directory analysed with ``--json`` into itself: a rank trace named as the breakdown phaseprof would
    write (rank0.breakdown.json) is an input and is not replaced."""
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    srcs = sorted(p for p in RANKS.iterdir() if p.name.endswith((".json", ".json.gz")))
    for p in srcs:
        shutil.copy(p, ranks / p.name)
    victim = ranks / "rank0.breakdown.json"
    os.link(ranks / srcs[0].name, victim)  # the same trace under the name of an output
    before = victim.read_bytes()
    from phaseprof.commands.main import main

    rc = main(["analyze", str(ranks), "--json", str(ranks), "-j", "1"])
    err = capsys.readouterr().err
    assert victim.read_bytes() == before
    assert rc == 2 and "refusing to overwrite" in err and "Traceback" not in err, err


def test_a_new_output_beside_the_input_is_written(trace: Path, tmp_path: Path) -> None:
    """The guard refuses only inputs: a fresh name, and an old output, are written as before."""
    from phaseprof.commands.main import main

    out = tmp_path / "bd.json"
    assert main(["analyze", str(trace), "--json", str(out), "-f", "json"]) == 0
    assert main(["analyze", str(trace), "--json", str(out), "-f", "json"]) == 0  # replacing an old result is fine
    assert out.read_bytes().startswith(b"{")
