"""The scanner's Rust unit tests (``native/src/tests.rs``: each exported function's contract on small inputs) run
with the suite, so CI runs them: ``cargo test`` (offline: the crate has no dependencies). Skipped without cargo."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from ..conftest import REPO


def test_cargo_test() -> None:
    cargo = shutil.which("cargo")
    if cargo is None:
        pytest.skip("cargo not installed: the scanner's Rust tests need it")
    manifest = REPO / "native" / "Cargo.toml"
    proc = subprocess.run([cargo, "test", "--offline", "--quiet", "--manifest-path", str(manifest)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert "test result: ok." in proc.stdout and " 0 failed" in proc.stdout, proc.stdout[-2000:]
