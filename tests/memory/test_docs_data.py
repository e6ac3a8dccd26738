"""The example inputs of docs/memory.md agree with the inline test configs."""

from __future__ import annotations

import json
from pathlib import Path

from tests.memory.configs import qwen35_35b_a3b, qwen38_2p4t
from tests.memory.test_facts import LOG

DATA = Path(__file__).parent / "data"


def test_doc_inputs_match_the_inline_configs():
    assert json.loads((DATA / "qwen36-35b-a3b-fp8" / "config.json").read_text()) == qwen35_35b_a3b(fp8=True)
    assert json.loads((DATA / "qwen38-2.4t" / "config.json").read_text()) == qwen38_2p4t()
    assert (DATA / "run-synthetic-h200" / "vllm_startup.log").read_text() == LOG


def test_doc_mentions_every_example_it_runs():
    doc = (Path(__file__).resolve().parents[2] / "docs" / "memory.md").read_text()
    for name in ("qwen36-35b-a3b-fp8", "qwen38-2.4t", "run-synthetic-h200", "broken-qwen3next"):
        assert f"tests/memory/data/{name}" in doc
