"""``phaseprof memory`` on hostile configs: one line naming the file and the field, exit 2, never a traceback
or a negative byte count. Each case mutates a real published config (tests/memory/configs.py) in one place."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from phaseprof.commands.main import main
from tests.hostile.helpers import one_line_error
from tests.memory.configs import qwen35_35b_a3b


def _text(**changes: Any) -> dict[str, Any]:
    cfg = qwen35_35b_a3b()
    cfg["text_config"].update(changes)
    return cfg


CASES: dict[str, tuple[Any, str]] = {
    "list": ([1, 2], "JSON object"),
    "null": (None, "null"),
    "zero_heads": (_text(num_attention_heads=0), "num_attention_heads"),
    "negative_kv_heads": (_text(num_key_value_heads=-2), "num_key_value_heads"),
    "negative_experts": (_text(num_experts=-256), "num_experts"),
    "zero_value_heads": (_text(linear_num_value_heads=0), "linear_num_value_heads"),
    "interval_zero": ({**_text(), "text_config": {k: v for k, v in _text(full_attention_interval=0)[
        "text_config"].items() if k != "layer_types"}}, "full_attention_interval"),
    "string_layers": (_text(num_hidden_layers="forty"), "num_hidden_layers"),
    "null_layers": (_text(num_hidden_layers=None), "num_hidden_layers"),
    "string_in_mlp_only_layers": (_text(mlp_only_layers=["0"]), "mlp_only_layers"),
    "list_quantization_config": ({**_text(), "quantization_config": ["fp8"]}, "quantization_config"),
    "10e12_layers": (_text(num_hidden_layers=10**12), "num_hidden_layers"),
    "zero_conv_kernel": (_text(linear_conv_kernel_dim=0), "linear_conv_kernel_dim"),
    "bool_heads": (_text(num_attention_heads=True), "num_attention_heads"),
    "float_heads": (_text(head_dim=255.5), "head_dim"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_config_isone_line_error(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg, field = CASES[case]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    one_line_error(["memory", "--model", str(tmp_path), "--gpu", "H200"], capsys, "config.json", field)


def test_gpu_memory_1e308(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "config.json").write_text(json.dumps(qwen35_35b_a3b()))
    one_line_error(["memory", "--model", str(tmp_path), "--gpu-memory", "1e308"], capsys, "--gpu-memory")


@pytest.mark.parametrize("data", [b"\xff\xfe not utf-8", b"[" * 100_000 + b"]" * 100_000])
def test_unreadable_config_bytes(data: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "config.json").write_bytes(data)
    one_line_error(["memory", "--model", str(tmp_path)], capsys, "config.json")


def test_config_fifo(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    os.mkfifo(tmp_path / "config.json")
    one_line_error(["memory", "--model", str(tmp_path / "config.json")], capsys, "config.json", "not a regular file")


def test_real_config_still_plans(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "config.json").write_text(json.dumps(qwen35_35b_a3b()))
    assert main(["memory", "--model", str(tmp_path), "--gpu", "H200", "--format", "json"]) == 0
