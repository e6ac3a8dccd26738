"""The native scanner ships in the wheel: ``pip wheel`` gives a platform wheel holding it; installed
into a fresh venv on a PATH without cargo, ``phaseprof analyze`` reads every committed trace with it (``--verbose``
says so, the JSON records ``tool.reader``) and prints the pure-Python reader's JSON on each.

The wheel and the venv: ``tests/wheel_env.py`` (one wheel per session, shared with the dashboard's wheel test).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import zipfile
from pathlib import Path

import orjson
import pytest

from phaseprof.trace import native
from tests.conftest import REPO
from tests.wheel_env import fresh_venv

#: Every committed trace file (run directories' traces, rank files, cut public traces).
TRACES = sorted(p.relative_to(REPO) for p in (REPO / "traces").rglob("*.json.gz"))
#: A wheel's name: distribution, version, then its python, ABI and platform tags.
_WHEEL_NAME = re.compile(r"phaseprof-[^-]+-(?P<python>[^-]+)-(?P<abi>[^-]+)-(?P<platform>[^-]+)\.whl")


@pytest.fixture(scope="module")
def wheel(built_wheel: tuple[Path, float]) -> Path:
    if shutil.which("cargo") is None:
        pytest.skip("cargo not installed: the wheel is built without the native scanner here")
    return built_wheel[0]


def test_the_wheel_is_a_platform_wheel_holding_the_scanner(wheel: Path, built_wheel: tuple[Path, float]) -> None:
    tags = _WHEEL_NAME.fullmatch(wheel.name)
    assert tags is not None, wheel.name
    assert tags["platform"] != "any" and tags["abi"] == "abi3" and tags["python"] == "cp310", wheel.name
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        meta = z.read(next(n for n in names if n.endswith(".dist-info/WHEEL"))).decode()
        requires = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    scanners = [n for n in names if re.fullmatch(r"phaseprof/trace/_phaseprof_scan[^/]*\.(so|pyd|dylib)", n)]
    assert len(scanners) == 1, names
    assert "Root-Is-Purelib: false" in meta
    assert re.search(r"^Requires-Dist: isal", requires, re.M), "isal is a plain dependency (ISA-L's inflate)"
    assert not any(n.startswith(("native/", "tests/")) for n in names)  # the crate stays in the sdist
    assert built_wheel[1] < 300, f"pip wheel took {built_wheel[1]:.0f} s"


@pytest.fixture(scope="module")
def no_cargo(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """The installed wheel's ``phaseprof`` and an environment whose PATH has no cargo (nor rustc)."""
    bin_dir = fresh_venv(wheel, tmp_path_factory.mktemp("native-wheel"), set())
    path = os.pathsep.join([str(bin_dir), *(d for d in os.environ.get("PATH", "").split(os.pathsep)
                                            if d and not (shutil.which("cargo", path=d) or
                                                          shutil.which("rustc", path=d)))])
    assert shutil.which("cargo", path=path) is None and shutil.which("rustc", path=path) is None
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "PHASEPROF_", "CARGO",
                                                                    "RUSTUP"))}
    return bin_dir / "phaseprof", {**env, "PATH": path}


def _analyze(phaseprof: Path, env: dict[str, str], reader: str) -> tuple[list[dict], list[str]]:
    """``phaseprof analyze -f json --verbose --reader READER`` of every committed trace, from the checkout (the
    paths in the JSON are the same both ways): the documents and the stderr lines."""
    proc = subprocess.run([str(phaseprof), "analyze", "-f", "json", "--verbose", "--reader", reader,
                           *map(str, TRACES)], cwd=REPO, env=env, capture_output=True, timeout=600)
    assert proc.returncode == 0, proc.stderr.decode()[-3000:]
    return orjson.loads(proc.stdout), proc.stderr.decode().splitlines()


def test_installed_without_cargo_it_reads_with_the_scanner_and_matches_pure_python(
        no_cargo: tuple[Path, dict[str, str]]) -> None:
    phaseprof, env = no_cargo
    venv = phaseprof.parent.parent
    docs, said = _analyze(phaseprof, env, "auto")
    assert len(docs) == len(TRACES) == len(said)
    for trace, line in zip(TRACES, said):
        m = re.fullmatch(rf"{re.escape(str(trace))}: read by the native scanner \((?P<lib>.+), ABI (?P<abi>\d+)\)",
                         line)
        assert m is not None, line
        assert Path(m["lib"]).is_relative_to(venv) and int(m["abi"]) == native.ABI_VERSION, line
    reference, said_py = _analyze(phaseprof, env, "python")
    assert all(line.endswith("read by the pure-Python reader: --reader python") for line in said_py), said_py
    for trace, doc, ref in zip(TRACES, docs, reference):
        assert (doc["tool"].pop("reader"), ref["tool"].pop("reader")) == ("native", "python"), trace
        assert doc == ref, f"{trace}: the native scanner's breakdown differs from the pure-Python reader's"
