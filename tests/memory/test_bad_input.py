"""Bad input: one clear line on stderr, exit code 2, no traceback."""

from __future__ import annotations

import json

import pytest

from phaseprof.commands.main import main
from tests.memory.configs import llama31_8b, qwen35_35b_a3b, without


@pytest.fixture()
def model_dir(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(qwen35_35b_a3b()))
    return str(tmp_path)


def _run(capsys, *args):
    code = main(["memory", *args])
    err = capsys.readouterr().err.strip()
    return code, err


def test_unknown_gpu_lists_the_known_ones(capsys, model_dir):
    code, err = _run(capsys, "--model", model_dir, "--gpu", "H900")
    assert code == 2 and len(err.splitlines()) == 1
    assert "unknown GPU 'H900'" in err
    for name in ("H100", "H200", "B200", "GB200", "GB300", "MI300X", "A100-80GB", "L40S"):
        assert name in err


@pytest.mark.parametrize(("drop", "named"), [
    (("linear_key_head_dim", "linear_value_head_dim"), "linear_key_head_dim, linear_value_head_dim"),
    (("layer_types", "full_attention_interval"), "layer_types or full_attention_interval"),
    (("num_hidden_layers",), "num_hidden_layers"),
])
def test_config_without_needed_fields_names_them(capsys, tmp_path, drop, named):
    (tmp_path / "config.json").write_text(json.dumps(without(qwen35_35b_a3b(), *drop)))
    code, err = _run(capsys, "--model", str(tmp_path))
    assert code == 2 and len(err.splitlines()) == 1
    assert f"config lacks fields needed for the memory plan: {named}" in err


def test_dense_config_without_vocab_names_it(capsys, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(without(llama31_8b(), "vocab_size")))
    code, err = _run(capsys, "--model", str(tmp_path))
    assert code == 2 and err.endswith("config lacks fields needed for the memory plan: vocab_size")


@pytest.mark.parametrize(("args", "message"), [
    (("--max-model-len", "-5"), "--max-model-len must be a positive integer, got -5"),
    (("--max-model-len", "0"), "--max-model-len must be a positive integer, got 0"),
    (("--tp", "0"), "--tp must be a positive integer, got 0"),
    (("--tokens", "-1"), "--tokens must be a positive integer, got -1"),
    (("--cudagraph-max-size", "0"), "--cudagraph-max-size must be a positive integer, got 0"),
    (("--gpu-memory-utilization", "1.5"), "--gpu-memory-utilization must be in (0, 1], got 1.5"),
    (("--gpu-memory-utilization", "0"), "--gpu-memory-utilization must be in (0, 1], got 0.0"),
    (("--gpu-memory", "-80"), "--gpu-memory must be a positive number of GiB, got -80.0"),
    (("--gpu", "H100", "--gpu-memory", "80"), "give --gpu NAME or --gpu-memory GiB, not both"),
    (("--kv-cache-dtype", "fp4"), "--kv-cache-dtype 'fp4' is not modelled"),
    (("--mamba-ssm-dtype", "fp8"), "--mamba-ssm-dtype 'fp8' is not a vLLM mamba dtype"),
    (("--vllm-version", "0.19"), "--vllm-version '0.19' is not modelled"),
    (("--tp", "3"), "--tp 3 does not divide linear_num_value_heads (32)"),
])
def test_nonsense_numbers_are_one_line_exit_2(capsys, model_dir, args, message):
    code, err = _run(capsys, "--model", model_dir, *args)
    assert code == 2, err
    assert len(err.splitlines()) == 1 and message in err


def test_unknown_model_says_what_it_looked_for(capsys, tmp_path):
    code, err = _run(capsys, "--model", str(tmp_path / "nope"))
    assert code == 2 and len(err.splitlines()) == 1 and "nope" in err


def test_run_dir_without_facts_is_an_error(capsys, model_dir, tmp_path):
    code, err = _run(capsys, "--model", model_dir, "--run", str(tmp_path / "empty"))
    assert code == 2 and "not a run directory" in err
