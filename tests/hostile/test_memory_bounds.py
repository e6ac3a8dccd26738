"""``phaseprof memory`` round 2. It planned KV for 1000 KV heads of 32 attention
heads, for 7 heads on a hidden size of 4096, for top-8... top-100 of 8 experts, and printed integers above 2^64
for ``--max-model-len 1e20``; ``--activation-peak-gib 1e308`` / ``inf`` and ``--cudagraph-pool-gib inf`` were
OverflowError tracebacks. Inconsistent configs are refused naming the two fields; every numeric option is
bounded. Generated configs (each a real published config with fields redrawn) either plan with sane numbers or
fail with one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phaseprof.commands.main import main
from tests.hostile.helpers import one_line_error
from tests.memory.configs import llama31_8b, qwen35_35b_a3b


def _text(**changes: Any) -> dict[str, Any]:
    cfg = qwen35_35b_a3b()
    cfg["text_config"].update(changes)
    return cfg


def _llama(**changes: Any) -> dict[str, Any]:
    return {**llama31_8b(), **changes}


INCONSISTENT: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
    "kv_heads_over_heads": (_llama(num_key_value_heads=1000), ("num_key_value_heads (1000)",
                                                                "num_attention_heads (32)")),
    "heads_not_dividing_hidden": (_llama(num_attention_heads=7, num_key_value_heads=7),
                                  ("hidden_size (4096)", "num_attention_heads (7)")),
    "top_k_over_experts": (_text(num_experts=8, num_experts_per_tok=100), ("num_experts_per_tok (100)", "8")),
    "heads_not_multiple_of_kv": (_llama(num_key_value_heads=5), ("num_attention_heads (32)",
                                                                  "num_key_value_heads (5)")),
    "gdn_value_heads_not_multiple": (_text(linear_num_value_heads=33), ("linear_num_value_heads (33)",)),
}


@pytest.mark.parametrize("case", list(INCONSISTENT))
def test_inconsistent_config_is_refused(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg, words = INCONSISTENT[case]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    one_line_error(["memory", "--model", str(tmp_path), "--gpu", "H200"], capsys, "config.json", *words)


OPTIONS = [
    ("--max-model-len", str(10**20)), ("--tokens", str(10**20)), ("--max-num-batched-tokens", str(2**63)),
    ("--tp", str(10**9)), ("--block-size", str(2**40)), ("--max-num-seqs", str(10**12)),
    ("--cudagraph-max-size", str(10**9)), ("--num-speculative-tokens", str(10**9)),
    ("--activation-peak-gib", "1e308"), ("--activation-peak-gib", "inf"), ("--activation-peak-gib", "nan"),
    ("--cudagraph-pool-gib", "inf"), ("--cudagraph-pool-gib", "-1"), ("--kv-budget-gib", "inf"),
    ("--gpu-memory-utilization", "nan"),
]


@pytest.mark.parametrize("flag, value", OPTIONS, ids=[f"{f}={v[:8]}" for f, v in OPTIONS])
def test_numeric_option_bounds(flag: str, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    line = one_line_error(["memory", "--model", "qwen3.5-35b-a3b", "--gpu", "H200", flag, value], capsys, flag)
    assert len(line) < 200  # a 10^20 is not echoed digit for digit past the 80-column line


def test_largest_allowed_values_stay_in_int64(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["memory", "--model", "qwen3.5-35b-a3b", "--gpu", "H200", "--max-model-len", str(1 << 32),
                 "--activation-peak-gib", str(1 << 20), "--cudagraph-pool-gib", "0", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert all(abs(n) < 2**63 for n in _ints(doc))


def _ints(v: Any) -> list[int]:
    if isinstance(v, bool):
        return []
    if isinstance(v, int):
        return [v]
    if isinstance(v, dict):
        return [n for x in v.values() for n in _ints(x)]
    if isinstance(v, list):
        return [n for x in v for n in _ints(x)]
    return []


_FIELDS = ["num_attention_heads", "num_key_value_heads", "hidden_size", "head_dim", "num_experts",
           "num_experts_per_tok", "linear_num_key_heads", "linear_num_value_heads", "num_hidden_layers",
           "full_attention_interval", "max_position_embeddings"]
_NUMBER = st.one_of(st.integers(0, 64), st.sampled_from([1000, 4096, 1 << 20, 1 << 24, 1 << 40, 2**63, 2**70]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=st.dictionaries(st.sampled_from(_FIELDS), _NUMBER, min_size=1, max_size=4))
def test_generated_configs(changes: dict[str, int], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "config.json").write_text(json.dumps(_text(**changes)))
    rc = main(["memory", "--model", str(tmp_path), "--gpu", "H200", "--format", "json"])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    if rc == 0:
        assert all(abs(n) < 2**63 for n in _ints(json.loads(out)))
    else:
        assert rc == 2 and len([ln for ln in err.splitlines() if ln.strip()]) == 1, err


def test_fields_in_range_whose_products_leave_int64(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Found by test_generated_configs: 16M heads of head_dim 16M are each allowed, their weight count is not."""
    (tmp_path / "config.json").write_text(json.dumps(_text(num_attention_heads=1 << 24, head_dim=1 << 24)))
    assert main(["memory", "--model", str(tmp_path), "--gpu", "H200", "--format", "json"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and "beyond a 64-bit integer" in err
    assert str(tmp_path) in " ".join(err.split())
