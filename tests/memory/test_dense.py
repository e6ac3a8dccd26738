"""Dense models keep vLLM's ordinary 16-token block and get no GDN lines."""

from __future__ import annotations

import io

from rich.console import Console

from phaseprof.memory import MemoryInputs, build_memory_plan
from phaseprof.memory.params import count_weights
from phaseprof.memory.model_shape import shape_from_hf_config
from phaseprof.memory.render import render_plan
from phaseprof.memory.report import plan_to_dict
from tests.memory.configs import llama31_8b


def _plan(**kw):
    return build_memory_plan(MemoryInputs(model="llama-3.1-8b", **kw), hf_config=llama31_8b())


def test_llama_gets_the_16_token_block_and_no_gdn():
    p = _plan(max_model_len=8192)
    L = p.layout
    assert L.block_size_tokens == 16
    assert L.attn_bytes_per_token_per_layer == 2 * 8 * 128 * 2 == 4096
    assert L.page_bytes == 16 * 4096 and L.pool_block_bytes == 32 * 16 * 4096   # one group of 32 layers
    assert L.gdn is None and L.num_gdn_layers == 0 and L.gdn_groups == 0
    assert L.mamba_padding_bytes == 0 and L.predicted_log_lines == ()
    r = p.request
    assert (r.attention_layer_blocks, r.gdn_layer_blocks, r.gdn_bytes) == (512 * 32, 0, 0)
    assert r.pool_bytes == 8192 * 4096 * 32 and r.fragmentation_bytes == 0     # 128 KiB/token, 1 GiB at 8K


def test_dense_table_and_json_have_no_gdn_lines():
    p = _plan(max_model_len=8192, tokens=1000)
    buf = io.StringIO()
    render_plan(p, Console(file=buf, width=200))
    text = buf.getvalue()
    assert "GDN" not in text and "mamba" not in text and "16 tokens" in text
    d = plan_to_dict(p)
    assert d["kv_cache"]["gdn_state"] is None and d["model"]["is_hybrid"] is False
    assert d["request"]["unused_attention_tokens"] == 63 * 16 - 1000 == 8


def test_llama_weight_count_is_exact():
    assert count_weights(shape_from_hf_config(llama31_8b())).params == 8_030_261_248
