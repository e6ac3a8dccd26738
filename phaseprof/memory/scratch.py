"""The CUDA-graph scratch KV cache: vLLM's memory-profiling capture pass allocates ``min_blocks`` pool blocks.

``GPUModelRunner._init_minimal_kv_cache_for_profiling`` (vllm/v1/worker/gpu_model_runner.py) sets
``num_gpu_blocks_override = min_blocks`` and allocates a real KV cache of that many blocks before capturing the
profiling graphs, outside the ``gpu_memory_utilization`` budget (so lowering it does not help):
- 0.23.0: ``min_blocks = max_cudagraph_capture_size or 1``  (seed 000: 8192 blocks of 1056 tokens → OOM)
- 0.28.0: ``min_blocks = min(max_num_seqs, max_cudagraph_capture_size) or 1``  ("1 block *per sequence*")
The cache is ``group_size`` tensors of ``page * min_blocks`` bytes each (``get_kv_cache_config_from_groups``),
allocated one after the other: the OOM message names one tensor ("Tried to allocate 16.50 GiB").
It runs only on CUDA with CUDA graphs on (``Worker.determine_available_memory``); ROCm and eager skip it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from phaseprof.memory import defaults as D
from phaseprof.gpu_names import GpuEntry
from phaseprof.memory.kv_plan import KvLayout


@dataclass(frozen=True)
class ServingSettings:
    """Scheduler/compilation options; ``None`` = vLLM's default for the GPU (``vllm serve``)."""

    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    max_cudagraph_capture_size: int | None = None
    num_speculative_tokens: int = 0
    enforce_eager: bool = False


@dataclass(frozen=True)
class ResolvedServing:
    max_num_seqs: int
    max_num_batched_tokens: int
    max_cudagraph_capture_size: int
    capture_size_source: str


def resolve_serving(s: ServingSettings, gpu: GpuEntry | None, vllm_version: str) -> ResolvedServing:
    """``EngineArgs.get_batch_defaults`` (OpenAI server) and ``VllmConfig._set_cudagraph_sizes``."""
    large = gpu is not None and gpu.total_bytes >= D.LARGE_GPU_THRESHOLD_BYTES and "A100" not in gpu.name
    seqs = s.max_num_seqs or (D.SERVER_MAX_NUM_SEQS_LARGE_GPU if large else D.SERVER_MAX_NUM_SEQS_SMALL_GPU)
    batched = s.max_num_batched_tokens or (
        D.SERVER_MAX_NUM_BATCHED_TOKENS_LARGE_GPU if large else D.SERVER_MAX_NUM_BATCHED_TOKENS_SMALL_GPU)
    if s.max_cudagraph_capture_size is not None:
        size, source = s.max_cudagraph_capture_size, "--cudagraph-max-size"
    else:
        cap = D.DEFAULT_MAX_CUDAGRAPH_CAPTURE_SIZE
        if vllm_version == "0.28" and gpu is not None and gpu.is_blackwell_datacenter:
            cap = D.BLACKWELL_MAX_CUDAGRAPH_CAPTURE_SIZE_028
        size = min(seqs * (1 + s.num_speculative_tokens) * 2, cap)
        source = f"vLLM default min(max_num_seqs*{2 * (1 + s.num_speculative_tokens)}, {cap})"
    if size > batched:
        size, source = batched, f"{source}, capped at max_num_batched_tokens"
    return ResolvedServing(seqs, batched, size, source)


@dataclass(frozen=True)
class ScratchFix:
    """One way out of the scratch OOM; ``scratch_bytes`` is the scratch after the fix (None: no scratch) and
    ``fits`` whether that is within the free memory."""

    name: str
    detail: str
    scratch_bytes: int | None
    fits: bool = True


@dataclass(frozen=True)
class ScratchCheck:
    applies: bool
    reason: str
    min_blocks: int
    min_blocks_rule: str
    tensor_bytes: int
    num_tensors: int
    free_bytes: int | None
    free_source: str
    fixes: tuple[ScratchFix, ...]

    @property
    def scratch_bytes(self) -> int:
        """Total scratch KV cache: ``num_tensors`` tensors of ``tensor_bytes``."""
        return self.tensor_bytes * self.num_tensors if self.applies else 0

    @property
    def exceeds_free(self) -> bool | None:
        return None if self.free_bytes is None or not self.applies else self.scratch_bytes > self.free_bytes

    @property
    def tensors_before_oom(self) -> int | None:
        """How many of the scratch tensors are allocated before the one that fails."""
        if not self.exceeds_free or self.free_bytes is None:
            return None
        return max(0, self.free_bytes) // self.tensor_bytes


def min_blocks(vllm_version: str, serving: ResolvedServing) -> tuple[int, str]:
    if vllm_version == "0.23":
        return serving.max_cudagraph_capture_size or 1, "0.23: max_cudagraph_capture_size"
    return (min(serving.max_num_seqs, serving.max_cudagraph_capture_size) or 1,
            "0.28: min(max_num_seqs, max_cudagraph_capture_size)")


def scratch_check(layout: KvLayout, *, serving: ResolvedServing, enforce_eager: bool, vllm_version: str,
                  gpu: GpuEntry | None, free_bytes: int | None, free_source: str,
                  smaller_block_layout: KvLayout | None = None) -> ScratchCheck:
    """Size the scratch, compare it with the memory free when it is allocated, and list fixes if it does not fit.

    ``free_bytes`` = device total - weights - runtime overhead: the scratch is allocated after the weights and
    the eager profile run, outside the utilization budget. ``smaller_block_layout`` is the same model with a
    bf16 SSM state (the 'smaller block' fix), when the current state is wider."""
    blocks, rule = min_blocks(vllm_version, serving)
    applies, reason = True, "CUDA graphs are captured: the profiling pass allocates a scratch KV cache"
    if enforce_eager:
        applies, reason = False, "--enforce-eager: no CUDA graphs, no scratch KV cache"
    elif gpu is not None and not gpu.is_cuda:
        applies, reason = False, f"{gpu.name} is not CUDA: vLLM skips the CUDA-graph memory profile there"
    per_block = layout.pool_block_bytes
    check = ScratchCheck(applies, reason, blocks, rule, layout.page_bytes * blocks, layout.group_size_layers,
                         free_bytes, free_source, ())
    if not check.exceeds_free or free_bytes is None:
        return check
    fixes = []
    fit = max(0, free_bytes) // per_block
    if fit >= 1:
        fixes.append(ScratchFix("cap capture size",
                                f"--max-cudagraph-capture-size <= {fit} (the most that fits; leave headroom for "
                                "the graph pool itself); larger batches then run eagerly", fit * per_block))
    patched = min(blocks, D.MIN_BLOCKS_PATCH)
    fixes.append(ScratchFix("min_blocks patch",
                            f"min_blocks = min(max_cudagraph_capture_size, {D.MIN_BLOCKS_PATCH}) in "
                            "_init_minimal_kv_cache_for_profiling (seed 000's patch_minimal_kv_cache.sh)",
                            patched * per_block))
    if vllm_version == "0.23":
        seqs_blocks = min(serving.max_num_seqs, serving.max_cudagraph_capture_size)
        fixes.append(ScratchFix("vLLM 0.28 rule",
                                f"0.28 allocates min(max_num_seqs, capture size) = {seqs_blocks} blocks; "
                                "there, a lower --max-num-seqs shrinks it", seqs_blocks * per_block))
    elif fit >= 1:
        fixes.append(ScratchFix("lower max_num_seqs", f"--max-num-seqs <= {fit} (0.28 sizes the scratch by it)",
                                min(fit, blocks) * per_block))
    if smaller_block_layout is not None:
        fixes.append(ScratchFix("smaller block",
                                f"--mamba-ssm-cache-dtype bfloat16: block {layout.block_size_tokens} → "
                                f"{smaller_block_layout.block_size_tokens} tokens",
                                blocks * smaller_block_layout.pool_block_bytes))
    fixes.append(ScratchFix("enforce eager", "--enforce-eager: no graphs, no scratch (seed 000: ~68 ms floor)", None))
    fixes = [replace(f, fits=f.scratch_bytes is None or f.scratch_bytes <= free_bytes) for f in fixes]
    return ScratchCheck(applies, reason, blocks, rule, check.tensor_bytes, check.num_tensors, free_bytes,
                        free_source, tuple(fixes))
