"""The JSON document validates against memory_plan.schema.json, for hybrid, dense, budget and run-fact cases."""

from __future__ import annotations

import json
from importlib import resources

import jsonschema
import pytest

from phaseprof.commands.main import main
from phaseprof.memory import MemoryInputs, build_memory_plan
from phaseprof.memory.defaults import SCHEMA_VERSION
from phaseprof.memory.report import SCHEMA_FILE, plan_to_dict
from tests.memory.configs import llama31_8b, qwen35_35b_a3b, qwen38_2p4t
from tests.memory.test_facts import LOG


@pytest.fixture(scope="module")
def validator():
    schema = json.loads(resources.files("phaseprof.memory").joinpath(SCHEMA_FILE).read_text())  # as installed
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


CASES = {
    "seed000-oom": (qwen35_35b_a3b(fp8=True), dict(gpu="H100", max_model_len=8192, cudagraph_max_size=8192,
                                                   max_num_batched_tokens=8192, prefix_caching=False)),
    "seed004-kv-budget": (qwen38_2p4t(), dict(tokens=10240, max_model_len=10240, kv_budget_gib=200, tp=1,
                                              prefix_caching=False)),
    "dense-no-gpu": (llama31_8b(), dict(max_model_len=8192)),
    "dense-eager-rocm": (llama31_8b(), dict(gpu="MI300X", enforce_eager=True)),
}


@pytest.mark.parametrize("case", CASES)
def test_plan_json_validates(validator, case):
    cfg, kw = CASES[case]
    doc = json.loads(json.dumps(plan_to_dict(build_memory_plan(MemoryInputs(model=case, **kw), hf_config=cfg))))
    validator.validate(doc)
    assert doc["schema_version"] == SCHEMA_VERSION


def test_cli_json_with_run_facts_validates(validator, tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps(qwen35_35b_a3b()))
    run = tmp_path / "run"
    run.mkdir()
    (run / "vllm_startup.log").write_text(LOG)
    code = main(["memory", "--model", str(tmp_path), "--gpu", "H200", "--max-model-len", "8192",
                 "--run", str(run), "--format", "json"])
    out = capsys.readouterr().out
    assert code == 0
    doc = json.loads(out)
    validator.validate(doc)
    assert doc["vllm_facts"]["attention_block_size_tokens"] == 544
    assert doc["comparisons"][0] == {"name": "attention block size", "unit": "tokens", "predicted": 1056,
                                     "logged": 544, "note": "vLLM logs it only for hybrid models", "difference": -512}
