"""vLLM's logged facts from a run directory, beside the prediction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from phaseprof.memory import MemoryInputs, build_memory_plan
from phaseprof.memory.facts import load_run_facts
from phaseprof.records import EngineSettings
from phaseprof.vllm_log import parse_values
from tests.memory.configs import qwen35_35b_a3b_as_qwen3next

# SYNTHETIC lines, not a capture: vLLM 0.23's INFO format strings (platforms/interface.py, gpu_worker.py,
# gpu_model_runner.py, kv_cache_utils.py) with self-consistent numbers for the bf16 35B-A3B: 57.60 GiB of KV is
# 5551 pool blocks of 544 x 2 KiB x 10 layers; a request at 8192 tokens holds 16 + 3 x 2 of them (align mode).
LOG = """\
INFO 05-01 12:00:01 [interface.py:671] Setting attention block size to 544 tokens to ensure that attention page size is >= mamba page size.
INFO 05-01 12:00:01 [interface.py:695] Padding mamba page size by 1.49% to ensure that mamba page size and attention page size are exactly equal.
INFO 05-01 12:01:10 [gpu_model_runner.py:5188] Model loading took 64.61 GiB memory and 35.120000 seconds
INFO 05-01 12:02:00 [gpu_model_runner.py:6518] Estimated CUDA graph memory: 0.95 GiB total
INFO 05-01 12:02:01 [gpu_worker.py:481] Available KV cache memory: 57.60 GiB
INFO 05-01 12:02:01 [kv_cache_utils.py:1740] GPU KV cache size: 2,066,990 tokens
INFO 05-01 12:02:01 [kv_cache_utils.py:1745] Maximum concurrency for 8,192 tokens per request: 252.32x
"""


def test_parse_values_reads_every_known_fact():
    f, _ = parse_values(LOG.splitlines())
    assert f == {"attention_block_size_tokens": 544, "mamba_page_padding_pct": 1.49, "model_loading_gib": 64.61,
                 "cudagraph_estimate_gib": 0.95, "available_kv_cache_gib": 57.60, "kv_cache_tokens": 2_066_990,
                 "max_concurrency_tokens": 8192, "max_concurrency": 252.32}


def test_028_one_line_capacity_format_is_read_too():
    line = "GPU KV cache size: 1,234 tokens, Maximum concurrency for 4,096 tokens per request: 3.50x"
    assert parse_values([line])[0] == {"kv_cache_tokens": 1234, "max_concurrency_tokens": 4096, "max_concurrency": 3.5}


CPU_RUN = Path(__file__).resolve().parents[2] / "traces/cpu/tiny-hybrid-prefill128-decode8"
SERVER_RUN = Path(__file__).resolve().parents[2] / "traces/h200/server-graph/prefill-4096"


def test_settings_are_the_records_fields_and_unknown_where_it_keeps_none():
    """A committed in-process capture: the settings are its engine arguments as recorded; a server capture's
    record keeps what the server reported (max_model_len) and nothing else is guessed."""
    f = load_run_facts(CPU_RUN)
    assert (f.engine.max_model_len, f.engine.mamba_ssm_cache_dtype, f.engine.enable_prefix_caching) == \
        (137, "float32", False)
    assert (f.preset, f.device_kind, f.vllm_version) == ("tiny-hybrid", "cpu", "0.28.0")
    served = load_run_facts(SERVER_RUN)
    assert served.engine.max_model_len == 4128
    assert (served.engine.mamba_ssm_cache_dtype, served.engine.enable_prefix_caching) == (None, None)


def test_flags_in_a_command_line_are_not_settings(tmp_path):
    """A run.json naming settings only in a command line: the record's fields say nothing, so nothing is
    known (no text is searched for flags)."""
    (tmp_path / "run.json").write_text(json.dumps({"command": "vllm serve m --max-model-len 8192 "
                                                   "--mamba-ssm-cache-dtype float32 --no-enable-prefix-caching"}))
    (tmp_path / "vllm_startup.log").write_text(LOG)
    f = load_run_facts(tmp_path)
    assert f.engine == EngineSettings()
    assert f.kv_cache_tokens == 2_066_990 and len(f.raw_lines) == 7


@pytest.fixture()
def run_dir(tmp_path):
    (tmp_path / "vllm_startup.log").write_text(LOG)
    return tmp_path


def test_plan_sets_the_logged_facts_beside_the_prediction(run_dir):
    p = build_memory_plan(MemoryInputs(model="x", gpu="H200", max_model_len=8192, run_dir=str(run_dir)),
                          hf_config=qwen35_35b_a3b_as_qwen3next())
    rows = {c.name: c for c in p.comparisons}
    assert rows["attention block size"].difference == 0
    assert rows["mamba page padding"].difference == pytest.approx(0)
    assert rows["GPU KV cache size"].predicted == pytest.approx(2_066_990, rel=1e-3)
    assert rows["max concurrency at 8192 tokens"].logged == 252.32
    # The graph estimate comes from the run; the activation peak is derived from the logged numbers.
    items = {i.name: i for i in p.budget.items}
    assert items["CUDA-graph pool estimate"].source == "run"
    assert items["activation peak + non-torch"].source == "run"


def test_settings_that_differ_from_the_plan_are_warned_about(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps({
        "engine": {"kwargs": {"mamba_ssm_cache_dtype": "float32"}},
        "vllm_startup_facts": {"attention_block_size_tokens": 1056}}))
    p = build_memory_plan(MemoryInputs(model="x", run_dir=str(tmp_path)), hf_config=qwen35_35b_a3b_as_qwen3next())
    assert any("mamba_ssm_cache_dtype=float32" in w for w in p.warnings)
    assert {c.name: c.difference for c in p.comparisons}["attention block size"] == 1056 - 544


def test_reads_the_run_json_that_phaseprof_capture_writes(tmp_path):
    """The contract with the capture stage: ``vllm_startup_facts`` from its own parser, the preset in ``model``,
    engine kwargs in ``engine`` (phaseprof/capture/runner.py::run_json)."""
    from phaseprof.capture.inprocess.vllm_facts import parse_facts

    startup = parse_facts(LOG.splitlines()).to_dict()
    assert load_run_facts(CPU_RUN).raw_lines  # a committed capture's stored lines are read back as stored
    (tmp_path / "run.json").write_text(json.dumps({
        "schema_version": "1", "kind": "capture", "command": "phaseprof capture --model qwen3.5-35b-a3b",
        "model": {"name": "qwen3.5-35b-a3b", "kind": "preset", "architecture": "Qwen3NextForCausalLM"},
        "engine": {"kwargs": {"max_model_len": 8192, "gpu_memory_utilization": 0.92}},
        "vllm_startup_facts": startup}))
    f = load_run_facts(tmp_path)
    assert (f.attention_block_size_tokens, f.mamba_page_padding_pct, f.kv_cache_tokens) == (544, 1.49, 2_066_990)
    assert (f.max_concurrency, f.max_concurrency_tokens, f.available_kv_cache_gib) == (252.32, 8192, 57.60)
    assert f.preset == "qwen3.5-35b-a3b" and f.engine.max_model_len == 8192
