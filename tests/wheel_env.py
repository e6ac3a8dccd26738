"""The wheel as users get it: ``pip wheel`` of a copy of the sources (the checkout gets no build/ directory), and
a fresh venv outside the checkout with only that wheel installed (``--no-deps``).

The venv has no system site-packages and no access to the checkout. Its dependencies are exactly the closure of
the wheel's own ``Requires-Dist`` (with the extras asked for), linked from the project's venv (where
``scripts/install.sh`` put them) instead of downloaded again: a dependency the wheel does not declare is missing
there, and what needs it fails.

One wheel per test session (:func:`built_wheel`, the ``built_wheel`` fixture of ``tests/conftest.py``): the
packaging and the dashboard tests install the same one.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import time
import zipfile
from email.parser import Parser
from importlib import metadata
from pathlib import Path

from tests.conftest import REPO

#: What the wheel is built from (tracked sources): the package, the crate of its native scanner, the build config.
BUILD_INPUTS = ("pyproject.toml", "setup.cfg", "MANIFEST.in", "README.md", "phaseprof", "native")
#: Not copied: caches, builds of the scanner made in the checkout (an editable install's, cargo's target/).
_LEFT_OUT = shutil.ignore_patterns("__pycache__", "*.pyc", "target", "_phaseprof_scan*", "*.egg-info")


def build_wheel(tmp: Path) -> tuple[Path, float]:
    """``pip wheel --no-deps`` of a copy of :data:`BUILD_INPUTS` under ``tmp``: the wheel and the seconds it took.
    Offline with the project venv's setuptools and setuptools-rust where it has both (``scripts/install.sh``
    installs them with the ``test`` extra); else in pip's isolated build environment (downloads them)."""
    src = tmp / "src"
    src.mkdir()
    for name in BUILD_INPUTS:
        p = REPO / name
        if p.is_dir():
            shutil.copytree(p, src / name, ignore=_LEFT_OUT)
        else:
            shutil.copy(p, src / name)
    dist = tmp / "dist"
    here = all(importlib.util.find_spec(m) for m in ("setuptools", "setuptools_rust", "wheel"))
    isolation = ["--no-build-isolation"] if here else []
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", *isolation, "-q", "-w", str(dist),
                           str(src)], capture_output=True, text=True)
    took = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = dist.glob("phaseprof-*.whl")
    return wheel, took


def requirements(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        meta = Parser().parsestr(z.read(name).decode())
    return meta.get_all("Requires-Dist") or []


def _closure(reqs: list[str], extras: set[str]) -> dict[str, metadata.Distribution]:
    """Every installed distribution ``reqs`` need (markers evaluated for ``extras``), transitively."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    out: dict[str, metadata.Distribution] = {}
    todo = [(r, extras) for r in reqs]
    while todo:
        text, ex = todo.pop()
        r = Requirement(text)
        if r.marker and not any(r.marker.evaluate({"extra": e}) for e in (ex or {""})):
            continue
        key = canonicalize_name(r.name)
        if key in out:
            continue
        dist = metadata.distribution(r.name)
        assert r.specifier.contains(dist.version, prereleases=True), f"{r}: installed {dist.version}"
        out[key] = dist
        todo += [(t, set(r.extras)) for t in dist.requires or []]
    return out


def _link_farm(dists: dict[str, metadata.Distribution], farm: Path) -> None:
    """Symlinks to the top-level modules, packages and metadata of ``dists`` (nothing else of the venv)."""
    farm.mkdir()
    for dist in dists.values():
        tops = {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}
        for top in tops:
            src = Path(str(dist.locate_file(top)))
            if src.exists() and not (farm / top).exists():
                (farm / top).symlink_to(src)


def fresh_venv(wheel: Path, tmp: Path, extras: set[str]) -> Path:
    """A fresh venv under ``tmp`` with ``wheel`` installed and its dependencies linked; its ``bin`` directory."""
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    _link_farm(_closure(requirements(wheel), extras), tmp / "deps")
    (site / "phaseprof-deps.pth").write_text(str(tmp / "deps") + "\n")
    # From the temp dir and without PYTHONPATH: were the checkout on the venv python's sys.path, pip would see its
    # phaseprof.egg-info (the editable install's) and call phaseprof "already installed".
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--no-deps",
                    "--no-index", "-q", str(wheel)], check=True, capture_output=True, text=True, cwd=tmp, env=env)
    return venv / "bin"
