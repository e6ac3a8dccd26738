"""The committed CPU capture (traces/cpu/tiny-hybrid-prefill128-decode8): facts computed from its raw events.

No engine needed: these tests read the files only, so others can rely on the fixture staying what its README says.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from phaseprof.trace.markers import parse_step_marker

FIXTURE = Path(__file__).resolve().parents[2] / "traces" / "cpu" / "tiny-hybrid-prefill128-decode8"


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    return json.loads(gzip.decompress((FIXTURE / "trace.json.gz").read_bytes()))


def _steps(doc: dict[str, Any]) -> list[dict[str, Any]]:
    ms = [e for e in doc["traceEvents"] if e.get("ph") == "X" and str(e.get("name")).startswith("phaseprof_step#")]
    return sorted(ms, key=lambda e: e["ts"])


def _ops_in(doc: dict[str, Any], step: dict[str, Any]) -> set[str]:
    lo, hi = step["ts"], step["ts"] + step["dur"]
    return {e["name"] for e in doc["traceEvents"]
            if e.get("cat") == "cpu_op" and lo <= e["ts"] and e["ts"] + e.get("dur", 0) <= hi}


def test_files_and_size() -> None:
    assert (FIXTURE / "README.md").is_file() and (FIXTURE / "run.json").is_file()
    assert (FIXTURE / "trace.json.gz").stat().st_size < 1_000_000


def test_one_prefill_step_then_eight_decode_steps(doc: dict[str, Any]) -> None:
    parsed = [parse_step_marker(e["name"]) for e in _steps(doc)]
    assert [p.index for p in parsed] == list(range(9))
    assert (parsed[0].context_requests, parsed[0].context_tokens, parsed[0].generation_tokens) == (1, 128, 0)
    assert all((p.context_tokens, p.generation_requests, p.generation_tokens) == (0, 1, 1) for p in parsed[1:])


def test_every_step_runs_gdn_attention_and_moe(doc: dict[str, Any]) -> None:
    steps = _steps(doc)
    prefill_ops = _ops_in(doc, steps[0])
    assert "_C::chunk_gated_delta_rule_cpu" in prefill_ops  # GDN chunked prefill
    for step in steps:
        ops = _ops_in(doc, step)
        assert "_C::cpu_fused_moe" in ops
        assert any("attention" in o for o in ops)
        assert any("gdn" in o or "delta_rule" in o for o in ops)
    for step in steps[1:]:
        assert "_C::fused_sigmoid_gating_delta_rule_update_cpu" in _ops_in(doc, step)  # GDN recurrent decode


def test_trace_metadata_matches_run_json(doc: dict[str, Any]) -> None:
    run = json.loads((FIXTURE / "run.json").read_text())
    assert doc["distributedInfo"]["world_size"] == 1
    meta = doc["phaseprof"]
    assert (meta["model"], meta["phase"], meta["prompt_tokens"], meta["max_tokens"]) == ("tiny-hybrid", "decode",
                                                                                         128, 9)
    assert meta["device"] == "cpu" and meta["vllm_version"] == run["versions"]["vllm"]
    assert [s["marker"] for s in run["profile"]["steps"]] == [e["name"] for e in _steps(doc)]
    assert run["vllm_startup_facts"]["attention_block_size_tokens"] > 16
