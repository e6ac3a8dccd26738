"""``phaseprof memory`` round 2 (issue 22, classes 6 and 15). It planned KV for 1000 KV heads of 32 attention
heads, for 7 heads on a hidden size of 4096, for top-8... top-100 of 8 experts, and printed integers above 2^64
for ``--max-model-len 1e20``; ``--activation-peak-gib 1e308`` / ``inf`` and ``--cudagraph-pool-gib inf`` were
OverflowError tracebacks. Inconsistent configs are refused naming the two fields; every numeric option is
bounded. Generated configs (each a real published config with fields redrawn) either plan with sane numbers or
fail with one line."""

from __future__ import annotations

import pytest

from tests.hostile.helpers import one_line_error

OPTIONS = [
    ("--activation-peak-gib", "1e308"), ("--activation-peak-gib", "inf"), ("--activation-peak-gib", "nan"),
    ("--cudagraph-pool-gib", "inf"), ("--cudagraph-pool-gib", "-1"), ("--kv-budget-gib", "inf"),
    ("--gpu-memory-utilization", "nan"),
]


@pytest.mark.parametrize("flag, value", OPTIONS, ids=[f"{f}={v[:8]}" for f, v in OPTIONS])
def test_numeric_option_bounds(flag: str, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    line = one_line_error(["memory", "--model", "qwen3.5-35b-a3b", "--gpu", "H200", flag, value], capsys, flag)
    assert len(line) < 200  # a 10^20 is not echoed digit for digit past the 80-column line
