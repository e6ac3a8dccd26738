"""``phaseprof memory``: the hybrid-model KV-cache and CUDA-graph memory plan, before vLLM runs out of memory."""

from __future__ import annotations

from enum import StrEnum
from typing import Optional

import typer

from phaseprof.memory import defaults as D


class OutputFormat(StrEnum):
    TABLE = "table"
    JSON = "json"


def memory(
    model: str = typer.Option(..., "--model", help="Preset name, a directory holding config.json, or a config.json."),
    max_model_len: Optional[int] = typer.Option(
        None, help="Tokens per request vLLM sizes for (default: config's max_position_embeddings)."),
    gpu: Optional[str] = typer.Option(None, help="Known GPU name (H100, H200, B200, GB300, MI300X, ...)."),
    gpu_memory: Optional[float] = typer.Option(None, help="Or the GPU's total memory in GiB."),
    gpu_memory_utilization: float = typer.Option(
        D.DEFAULT_GPU_MEMORY_UTILIZATION, help="vLLM's --gpu-memory-utilization."),
    kv_cache_dtype: str = typer.Option("auto", help="vLLM's --kv-cache-dtype (auto, bfloat16, fp8, ...)."),
    mamba_cache_dtype: str = typer.Option("auto", help="vLLM's --mamba-cache-dtype (GDN conv state)."),
    mamba_ssm_dtype: str = typer.Option(
        "auto", help="vLLM's --mamba-ssm-cache-dtype (GDN SSM state); auto = the config's mamba_ssm_dtype for "
        "Qwen3.5 architectures, else the model dtype."),
    cudagraph_max_size: Optional[int] = typer.Option(
        None, help="vLLM's --max-cudagraph-capture-size (default: vLLM's)."),
    tp: int = typer.Option(1, "--tp", help="Tensor-parallel size (numbers are per GPU)."),
    tokens: Optional[int] = typer.Option(None, help="Tokens of the request to cost (default: max-model-len)."),
    run: Optional[str] = typer.Option(
        None, "--run", help="A capture's run directory: show vLLM's logged facts beside the plan."),
    output_format: OutputFormat = typer.Option(OutputFormat.TABLE, "--format", help="table or json."),
    vllm_version: str = typer.Option(
        D.DEFAULT_VLLM_VERSION, help=f"vLLM rules to apply: {', '.join(D.VLLM_VERSIONS)}."),
    prefix_caching: bool = typer.Option(
        True, "--prefix-caching/--no-prefix-caching",
        help="vLLM's --enable-prefix-caching (GDN 'align' mode: 2 state blocks per request)."),
    block_size: Optional[int] = typer.Option(None, help="vLLM's --block-size (hybrid models round it up)."),
    max_num_seqs: Optional[int] = typer.Option(None, help="vLLM's --max-num-seqs (default: vLLM's for the GPU)."),
    max_num_batched_tokens: Optional[int] = typer.Option(
        None, help="vLLM's --max-num-batched-tokens (default: vLLM's)."),
    num_speculative_tokens: int = typer.Option(0, help="MTP/speculative tokens (widen conv state, add GDN blocks)."),
    enforce_eager: bool = typer.Option(False, help="vLLM's --enforce-eager: no CUDA graphs."),
    kv_budget_gib: Optional[float] = typer.Option(None, help="Also report capacity for this KV-cache budget (GiB)."),
    activation_peak_gib: Optional[float] = typer.Option(None, help="Known activation peak + non-torch memory (GiB)."),
    cudagraph_pool_gib: Optional[float] = typer.Option(None, help="Known CUDA-graph pool estimate (GiB)."),
) -> None:
    """KV bytes per token, GDN state, vLLM's unified block size, per-request cost, capacity, budget and the
    CUDA-graph scratch check."""
    # Imports inside the command keep `phaseprof --help` fast.
    from rich.console import Console

    from phaseprof.memory.plan import MemoryInputs, build_memory_plan
    from phaseprof.memory.render import render_plan
    from phaseprof.memory.report import plan_to_json
    from phaseprof.safe_text import for_terminal

    inputs = MemoryInputs(
        model=model, max_model_len=max_model_len, gpu=gpu, gpu_memory_gib=gpu_memory,
        gpu_memory_utilization=gpu_memory_utilization, kv_cache_dtype=kv_cache_dtype,
        mamba_cache_dtype=mamba_cache_dtype, mamba_ssm_dtype=mamba_ssm_dtype, cudagraph_max_size=cudagraph_max_size,
        tp=tp, tokens=tokens, run_dir=run, vllm_version=vllm_version, prefix_caching=prefix_caching,
        block_size=block_size, max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
        num_speculative_tokens=num_speculative_tokens, enforce_eager=enforce_eager, kv_budget_gib=kv_budget_gib,
        activation_peak_gib=activation_peak_gib, cudagraph_pool_gib=cudagraph_pool_gib,
    )
    plan = build_memory_plan(inputs)
    if output_format is OutputFormat.JSON:
        from phaseprof.safe_text import json_inert  # noqa: PLC0415

        typer.echo(json_inert(plan_to_json(plan)))
    else:
        render_plan(for_terminal(plan), Console())  # the terminal's width; 80 columns into a pipe


def register(app: typer.Typer) -> None:
    """Add ``phaseprof memory`` to ``app``."""
    app.command("memory")(memory)
