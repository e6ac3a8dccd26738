"""Numbers in a trace's top-level metadata: ``deviceProperties`` with ``numSms: 2**70`` ended
in an "Integer exceeds 64-bit range" traceback in every output format (the breakdown copies the GPU's
properties). deviceProperties, distributedInfo and phaseprof's own capture record are checked at load: integers
within int64, floats finite, bounded nesting; otherwise one line naming the file and the field, exit 2."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from phaseprof.commands.main import main
from tests.hostile.helpers import one_line_error

from ..conftest import REPO

TRACE = REPO / "traces/public-cut/mi300x_sglang_qwen3_8b_decode.json.gz"


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    with gzip.open(TRACE, "rb") as f:
        return json.load(f)


def _props(doc: dict[str, Any], **change: Any) -> list[dict[str, Any]]:
    props = [dict(p) for p in doc["deviceProperties"]]
    props[0].update(change)
    return props


@pytest.mark.parametrize("fmt", ["table", "json", "markdown"])
def test_num_sms_beyond_int64(fmt: str, doc: dict[str, Any], tmp_path: Path,
                              capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "t.json"
    p.write_text(json.dumps(dict(doc, deviceProperties=_props(doc, numSms=2**70))))
    one_line_error(["analyze", str(p), "-f", fmt], capsys, str(p), "deviceProperties[0].numSms",
                   "64-bit")


@pytest.mark.parametrize("key, value, words", [
    ("distributedInfo", {"rank": 0, "world_size": -(2**64)}, ("distributedInfo.world_size", "64-bit")),
    ("phaseprof", {"run": {"tokens": [1, 2**80]}}, ("phaseprof.run.tokens[1]", "64-bit")),
    ("deviceProperties", "nest", ("nested more than",)),
])
def test_other_metadata(key: str, value: Any, words: tuple[str, ...], doc: dict[str, Any], tmp_path: Path,
                        capsys: pytest.CaptureFixture[str]) -> None:
    if value == "nest":
        deep: Any = 1
        for _ in range(40):
            deep = {"x": deep}
        value = _props(doc, extra=deep)
    p = tmp_path / "t.json"
    p.write_text(json.dumps(dict(doc, **{key: value})))
    one_line_error(["analyze", str(p), "-f", "json"], capsys, str(p), *words)


def test_a_string_gpu_name_only(doc: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A GPU name that is no string (a number, a list) is no name: the breakdown names the GPU from its other
    properties (this ROCm trace: its gfx version), as when the name is missing."""
    p = tmp_path / "t.json"
    p.write_text(json.dumps(dict(doc, deviceProperties=_props(doc, name=["H200", 1]))))
    assert main(["analyze", str(p), "-f", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["trace"]["gpu_name"].startswith("AMD GPU (gfx")


def test_real_metadata_passes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(TRACE), "-f", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["trace"]["gpu_properties"]
