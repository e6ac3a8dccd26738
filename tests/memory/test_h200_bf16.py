"""The 35B-A3B shape with a bf16 GDN SSM state, as vLLM 0.23.0 runs the ``qwen3.5-35b-a3b`` preset on the H200.

The preset runs the decoder as Qwen3NextForCausalLM, which ignores ``mamba_ssm_dtype``: vLLM's "auto" SSM state
is then the model dtype (bf16). Prediction: 544-token blocks, mamba pages padded by 1.49%.
(The published Qwen3_5MoeForConditionalGeneration config says ``mamba_ssm_dtype: float32``, which vLLM copies in:
a real-checkpoint run logs 1056 tokens / 0.76%, as in seed 000.)

When a capture exists (``traces/h200/*/run.json`` or ``vllm_startup.log``), the lines vLLM logged there are compared
with the prediction for the settings the run names; otherwise the prediction is checked on its own.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from phaseprof.memory import CacheSettings, capacity, kv_layout, shape_from_hf_config
from phaseprof.memory.defaults import GIB
from phaseprof.memory.facts import load_run_facts
from tests.memory.configs import qwen35_35b_a3b, qwen35_35b_a3b_as_qwen3next

TRACES = Path(__file__).resolve().parents[2] / "traces" / "h200"

def _server_capture(run_dir: Path) -> bool:
    """A ``capture --server`` run: the server started the engine, so its startup log is not in the run."""
    run = run_dir / "run.json"
    return run.is_file() and json.loads(run.read_text()).get("source") == "server"


def _not_hybrid(run_dir: Path) -> bool:
    """A capture of a model without GDN layers (traces/h200/shapes: qwen3-30b-a3b, llama-3.1-8b): vLLM sets no
    hybrid block size for it, which is what this file predicts."""
    run = run_dir / "run.json"
    return run.is_file() and json.loads(run.read_text()).get("model", {}).get("is_hybrid") is False


def _no_startup_lines(run_dir: Path) -> bool:
    """A run recorded without vLLM's start-up facts and without its log (the c = 64 routing batch of
    scripts/gpu/routing_captures.py, written before that script kept them): nothing vLLM logged to compare."""
    run = run_dir / "run.json"
    return (run.is_file() and not json.loads(run.read_text()).get("vllm_startup_facts")
            and not (run_dir / "vllm_startup.log").is_file())


RUNS = sorted({p.parent for pat in ("run.json", "vllm_startup.log") for p in TRACES.rglob(pat)
               if not _server_capture(p.parent) and not _not_hybrid(p.parent) and not _no_startup_lines(p.parent)})


def _default_layout():
    """vLLM 0.23 defaults: kv auto (bf16), mamba dtypes auto, prefix caching on."""
    return kv_layout(shape_from_hf_config(qwen35_35b_a3b_as_qwen3next()), CacheSettings())


def test_default_ssm_state_is_bf16_and_the_block_544_tokens():
    L = _default_layout()
    assert (L.gdn.ssm_dtype, L.gdn.ssm_dtype_source) == ("bfloat16", "auto = conv state dtype")
    assert L.gdn.ssm_bytes == 32 * 128 * 128 * 2 and L.gdn.state_bytes == 1_048_576 + 49_152
    assert L.block_size_tokens == 544
    assert f"{L.mamba_padding_pct:.2f}" == "1.49"
    assert L.mamba_cache_mode == "align"  # prefix caching is on by default: 2 GDN blocks per request


def test_bf16_prediction_is_internally_consistent():
    L = _default_layout()
    state, attn_1, align = L.gdn.state_bytes, L.attn_bytes_per_token_per_layer, L.kernel_alignment_tokens
    assert L.block_size_tokens % align == 0
    assert L.page_bytes == L.block_size_tokens * attn_1 >= state               # attention page >= mamba page
    assert (L.block_size_tokens - align) * attn_1 < state                       # and it is the smallest such block
    assert L.mamba_padding_bytes == L.page_bytes - state
    assert L.mamba_padding_pct == pytest.approx(100 * L.mamba_padding_bytes / state)
    assert any(f"{L.block_size_tokens} tokens" in ln for ln in L.predicted_log_lines)
    assert any(f"{L.mamba_padding_pct:.2f}%" in ln for ln in L.predicted_log_lines)
    # The same shape, with the explicit flag or the real checkpoint's architecture:
    flag = kv_layout(shape_from_hf_config(qwen35_35b_a3b()), CacheSettings(mamba_ssm_cache_dtype="bfloat16"))
    real = kv_layout(shape_from_hf_config(qwen35_35b_a3b()), CacheSettings())
    assert flag.block_size_tokens == 544 and real.block_size_tokens == 1056


def _config_for(facts):
    """The run's preset when run.json names one we can load, else the inline preset form."""
    name = facts.preset
    if name:
        from phaseprof.presets import load_preset
        return load_preset(str(name)).config_dict()
    return qwen35_35b_a3b_as_qwen3next()


@pytest.mark.parametrize("run_dir", RUNS or [None], ids=[p.name for p in RUNS] or ["no-h200-capture-yet"])
def test_prediction_matches_vllm_on_the_h200(run_dir):
    if run_dir is None:
        # No capture committed yet: the prediction stands alone (checked above); make that visible here too.
        L = _default_layout()
        assert (L.block_size_tokens, f"{L.mamba_padding_pct:.2f}") == (544, "1.49")
        return
    facts = load_run_facts(run_dir)
    s = facts.engine
    cache = CacheSettings(  # a setting the run does not record: vLLM's default
        kv_cache_dtype=s.kv_cache_dtype or "auto",
        mamba_ssm_cache_dtype=s.mamba_ssm_cache_dtype or "auto",
        tensor_parallel_size=s.tensor_parallel_size or 1,
        enable_prefix_caching=s.enable_prefix_caching is not False,
    )
    L = kv_layout(shape_from_hf_config(_config_for(facts)), cache)
    why = (f"{run_dir}: predicted {L.block_size_tokens} tokens / {L.mamba_padding_pct:.2f}% with {cache} "
           f"(SSM state {L.gdn.ssm_dtype}: {L.gdn.ssm_dtype_source}); logged lines: {facts.raw_lines}")
    assert facts.attention_block_size_tokens is not None, f"{run_dir}: no 'Setting attention block size' line"
    assert facts.attention_block_size_tokens == L.block_size_tokens, why
    if facts.mamba_page_padding_pct is not None:
        assert facts.mamba_page_padding_pct == pytest.approx(round(L.mamba_padding_pct, 2), abs=0.005), why
    if None not in (facts.kv_cache_gib, facts.kv_cache_tokens):
        length = facts.max_concurrency_tokens or s.max_model_len or None
        assert length, f"{run_dir}: KV tokens logged but no max_model_len to interpret them"
        cap = capacity(L, kv_cache_bytes=round(facts.kv_cache_gib * GIB), max_model_len=length)
        # KV memory (measured or reserved) is logged to 0.01 GiB: allow that much, in pool blocks, either way.
        slack_blocks = 0.006 * GIB / L.pool_block_bytes + 1
        tokens_per_block = length / cap.pool_blocks_per_request
        assert abs(facts.kv_cache_tokens - cap.kv_cache_tokens) <= slack_blocks * tokens_per_block + 1, why
