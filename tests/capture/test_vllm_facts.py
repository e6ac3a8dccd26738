"""vLLM's startup log lines -> StartupFacts (GPU wording of 0.23, CPU wording of 0.28)."""

from __future__ import annotations

import logging

from phaseprof.capture.inprocess.vllm_facts import AttachedCollector, VllmLogCollector, parse_facts

GPU_023 = [
    "Setting attention block size to 1056 tokens to ensure that attention page size is >= mamba page size.",
    "Padding mamba page size by 0.76% to ensure that mamba page size and attention page size are exactly equal.",
    "Available KV cache memory: 98.76 GiB",
    "GPU KV cache size: 1,234,496 tokens",
    "Maximum concurrency for 8,224 tokens per request: 150.11x",
    "Using FLASH_ATTN backend.",
]
CPU_028 = [
    "Setting attention block size to 640 tokens to ensure that attention page size is >= mamba page size.",
    "Padding mamba page size by 19.40% to ensure that mamba page size and attention page size are exactly equal.",
    "Explicitly set (1.0/9.71) GiB for KV cache on node 0.",
    "GPU KV cache size: 111,384 tokens, Maximum concurrency for 136 tokens per request: 819.00x",
]


def test_gpu_lines() -> None:
    f = parse_facts(GPU_023)
    assert (f.attention_block_size_tokens, f.mamba_page_padding_pct) == (1056, 0.76)
    assert (f.kv_cache_tokens, f.max_concurrency_tokens, f.max_concurrency) == (1234496, 8224, 150.11)
    assert f.kv_cache_gib == 98.76
    assert f.raw_lines == tuple(GPU_023[:5])


def test_cpu_lines() -> None:
    f = parse_facts(CPU_028)
    assert (f.attention_block_size_tokens, f.mamba_page_padding_pct, f.kv_cache_gib) == (640, 19.4, 1.0)
    assert (f.kv_cache_tokens, f.max_concurrency_tokens, f.max_concurrency) == (111384, 136, 819.0)
    assert len(f.raw_lines) == 4


def test_dense_model_has_no_hybrid_facts() -> None:
    f = parse_facts(["GPU KV cache size: 500,000 tokens"])
    assert f.attention_block_size_tokens is None and f.mamba_page_padding_pct is None
    assert f.to_dict()["kv_cache_tokens"] == 500000


def test_collector_on_the_vllm_logger_restores_handlers() -> None:
    logger = logging.getLogger("vllm")
    console = logging.StreamHandler()
    console.setLevel(logging.INFO)
    logger.addHandler(console)
    try:
        seen: list[str] = []
        coll = VllmLogCollector(on_message=seen.append)
        with AttachedCollector(coll, quiet_console=True):
            assert console.level == logging.ERROR
            logging.getLogger("vllm.platforms.interface").info(
                "Setting attention block size to %d tokens to ensure ...", 1056)
        assert console.level == logging.INFO and coll not in logger.handlers
        assert coll.facts().attention_block_size_tokens == 1056 and len(seen) == 1
    finally:
        logger.removeHandler(console)
