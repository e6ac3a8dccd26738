"""``sweep --server --gpu``: the stated GPU is checked in one line before any request, and
refused without --server."""

from __future__ import annotations

import pytest

from phaseprof.commands.capture_server import stated_gpu
from phaseprof.commands.main import main
from phaseprof.errors import PhaseprofError


def test_stated_gpu_is_recorded_as_given_and_bad_names_are_one_line() -> None:
    assert stated_gpu(" NVIDIA H200 ") == "NVIDIA H200" and stated_gpu(None) is None
    for bad in ("", "x" * 81, "H200\x1b[31m", "a\nb"):
        with pytest.raises(PhaseprofError) as err:
            stated_gpu(bad)
        assert "\n" not in str(err.value) and "--gpu takes a GPU's name" in str(err.value)


def test_gpu_without_server_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sweep", "--gpu", "NVIDIA H200", "--model", "tiny-hybrid"]) == 2
    assert "--gpu goes with --server" in capsys.readouterr().err


def test_bad_gpu_with_server_fails_before_any_request(capsys: pytest.CaptureFixture[str]) -> None:
    # port 9 (discard) is never asked: the name is refused first
    assert main(["sweep", "--server", "http://127.0.0.1:9", "--gpu", "H\x07200"]) == 2
    assert "--gpu takes a GPU's name" in capsys.readouterr().err
