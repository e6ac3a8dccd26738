"""The native scanner built into this checkout for the tests, where ``pip install -e .`` (setuptools-rust) has not
built it: ``cargo build`` of ``native/`` copied to the name setuptools-rust gives it. Tests only: phaseprof itself
never builds it (the wheel ships it)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from phaseprof.trace import native

from .conftest import REPO


def scanner_or_skip() -> None:
    """Make sure the scanner is loaded in this process: build it where it is missing or refused and cargo is here,
    else skip the test (a machine without cargo reads traces in pure Python)."""
    if native.available():
        return
    cargo = shutil.which("cargo")
    if cargo is None:
        pytest.skip(f"cargo not installed and {native.status().problem}")
    target = REPO / "native" / "target"
    proc = subprocess.run([cargo, "build", "--release", "--offline", "--quiet", "--manifest-path",
                           str(REPO / "native" / "Cargo.toml"), "--target-dir", str(target)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    built = target / "release" / "libphaseprof_scan.so"
    dest = native.FOLDER / "_phaseprof_scan.abi3.so"
    tmp = dest.with_suffix(".tmp")
    shutil.copyfile(built, tmp)
    os.replace(tmp, dest)  # atomic: a process that has the old one mapped keeps it
    native._status, native._lib = None, None
    assert native.available(), native.status().problem
