"""One pipeline from options to a memory plan: ``MemoryInputs → build_memory_plan → MemoryPlan``.

The CLI (``phaseprof memory``) and the dashboard's Memory page both call ``build_memory_plan``; rendering lives
in ``render.py`` and ``report.py``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, replace
from typing import Any

from phaseprof.errors import PhaseprofError
from phaseprof.memory import defaults as D
from phaseprof.memory.budget import Budget, BudgetItem, memory_budget
from phaseprof.memory.facts import VllmFacts, load_run_facts
from phaseprof.gpu_names import GpuEntry
from phaseprof.memory.gpus import custom_gpu, lookup_gpu
from phaseprof.memory.kv_plan import (Capacity, CacheSettings, KvLayout, RequestCost, capacity, kv_layout,
                                      request_cost)
from phaseprof.memory.model_shape import ModelShape, load_hf_config, shape_from_hf_config
from phaseprof.memory.validate import check_hf_config
from phaseprof.memory.params import WeightEstimate, count_weights
from phaseprof.memory.scratch import ResolvedServing, ScratchCheck, ServingSettings, resolve_serving, scratch_check

DEFAULT_MAX_MODEL_LEN_TOKENS = 8192
"""Used only when neither --max-model-len nor the config's max_position_embeddings is given."""


@dataclass(frozen=True)
class MemoryInputs:
    """Every option of ``phaseprof memory``; ``None`` = vLLM's default (or "not given")."""

    model: str
    max_model_len: int | None = None
    gpu: str | None = None
    gpu_memory_gib: float | None = None
    gpu_memory_utilization: float = D.DEFAULT_GPU_MEMORY_UTILIZATION
    kv_cache_dtype: str = "auto"
    mamba_cache_dtype: str = "auto"
    mamba_ssm_dtype: str = "auto"
    cudagraph_max_size: int | None = None
    tp: int = 1
    tokens: int | None = None
    run_dir: str | None = None
    vllm_version: str = D.DEFAULT_VLLM_VERSION
    prefix_caching: bool = True
    block_size: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    num_speculative_tokens: int = 0
    enforce_eager: bool = False
    kv_budget_gib: float | None = None
    activation_peak_gib: float | None = None
    cudagraph_pool_gib: float | None = None


@dataclass(frozen=True)
class Comparison:
    """A number vLLM logged beside ours. ``difference`` = logged - predicted (None if either is missing)."""

    name: str
    unit: str
    predicted: float | None
    logged: float | None
    note: str = ""

    @property
    def difference(self) -> float | None:
        return None if self.predicted is None or self.logged is None else self.logged - self.predicted


@dataclass(frozen=True)
class MemoryPlan:
    inputs: MemoryInputs
    model_source: str
    shape: ModelShape
    cache: CacheSettings
    layout: KvLayout
    max_model_len: int
    request: RequestCost
    weights: WeightEstimate
    gpu: GpuEntry | None
    serving: ResolvedServing
    scratch: ScratchCheck
    budget: Budget | None
    kv_budget: Capacity | None
    facts: VllmFacts | None
    comparisons: tuple[Comparison, ...]
    warnings: tuple[str, ...]


_MAX_GIB = 1 << 20  # 1 PiB: beyond any GPU or node
_MAX_TOKENS = 1 << 32  # 4G tokens: 4,000 times the longest context served today; 1e20 printed numbers past 2^64
# flag -> largest value: every integer option is bounded, so no derived byte count leaves int64.
_INT_LIMITS = {"--max-model-len": _MAX_TOKENS, "--tokens": _MAX_TOKENS, "--max-num-batched-tokens": _MAX_TOKENS,
               "--cudagraph-max-size": 1 << 20, "--tp": 1 << 16, "--block-size": 1 << 20, "--max-num-seqs": 1 << 24}
_MAX_SPECULATIVE_TOKENS = 1 << 10


def validate_inputs(i: MemoryInputs) -> None:
    """Nonsense numbers → one PhaseprofError naming the flag (exit 2). Every numeric option has a lower and an
    upper bound, and GiB amounts must be finite (inf or 1e308 GiB overflowed the byte arithmetic)."""
    positive_ints = {"--max-model-len": i.max_model_len, "--cudagraph-max-size": i.cudagraph_max_size, "--tp": i.tp,
                     "--tokens": i.tokens, "--block-size": i.block_size, "--max-num-seqs": i.max_num_seqs,
                     "--max-num-batched-tokens": i.max_num_batched_tokens}
    for flag, v in positive_ints.items():
        if v is not None and v <= 0:
            raise PhaseprofError(f"{flag} must be a positive integer, got {v}")
        if v is not None and v > _INT_LIMITS[flag]:
            raise PhaseprofError(f"{flag} must be at most {_INT_LIMITS[flag]:,}, got {_short(v)}")
    for flag, g in {"--gpu-memory": i.gpu_memory_gib, "--kv-budget-gib": i.kv_budget_gib}.items():
        if g is not None and not g > 0:
            raise PhaseprofError(f"{flag} must be a positive number of GiB, got {g}")
        if g is not None and not g <= _MAX_GIB:  # 1e308 GiB overflowed the byte arithmetic
            raise PhaseprofError(f"{flag} must be at most {_MAX_GIB:,} GiB, got {g}")
    known = {"--activation-peak-gib": i.activation_peak_gib, "--cudagraph-pool-gib": i.cudagraph_pool_gib}
    for flag, g in known.items():
        if g is not None and not 0 <= g <= _MAX_GIB:
            raise PhaseprofError(f"{flag} must be between 0 and {_MAX_GIB:,} GiB, got {g}")
    if not 0 < i.gpu_memory_utilization <= 1:
        raise PhaseprofError(f"--gpu-memory-utilization must be in (0, 1], got {i.gpu_memory_utilization}")
    if not 0 <= i.num_speculative_tokens <= _MAX_SPECULATIVE_TOKENS:
        raise PhaseprofError(f"--num-speculative-tokens must be between 0 and {_MAX_SPECULATIVE_TOKENS}, got "
                             f"{_short(i.num_speculative_tokens)}")
    if i.gpu is not None and i.gpu_memory_gib is not None:
        raise PhaseprofError("give --gpu NAME or --gpu-memory GiB, not both")


def _short(v: int) -> str:
    """An integer option as given, cut to 24 digits (a 10^1000 must not fill the error line)."""
    text = str(v)
    return text if len(text) <= 24 else f"{text[:12]}...({len(text)} digits)"


def _gib(x: float | None) -> int | None:
    return None if x is None else round(x * D.GIB)


def _item(name: str, given: float | None, logged: float | None, note: str) -> BudgetItem:
    if given is not None:
        return BudgetItem(name, _gib(given), "input", note)
    if logged is not None:
        return BudgetItem(name, _gib(logged), "run", note)
    return BudgetItem(name, None, "unknown", note + "; measured by vLLM at startup, give it or --run a capture")


def _comparisons(plan_layout: KvLayout, budget: Budget | None, weights: WeightEstimate, facts: VllmFacts,
                 max_model_len: int) -> tuple[Comparison, ...]:
    L = plan_layout
    rows = [
        Comparison("attention block size", "tokens", L.block_size_tokens if L.gdn else None,
                   facts.attention_block_size_tokens,
                   "vLLM logs it only for hybrid models"),
        Comparison("mamba page padding", "%", round(L.mamba_padding_pct, 2) if L.gdn else None,
                   facts.mamba_page_padding_pct),
        Comparison("model weights", "GiB", round(weights.bytes_per_gpu / D.GIB, 2), facts.model_loading_gib,
                   "logged 'Model loading took' also holds what the config count skips (e.g. a vision tower)"),
    ]
    if budget is not None:
        derived = budget.activation_peak.source == "run"
        rows.append(Comparison("available KV cache", "GiB", round(budget.kv_cache_bytes / D.GIB, 2),
                               facts.available_kv_cache_gib,
                               "upper bound: activation/graph memory unknown" if budget.kv_is_upper_bound else
                               "activation peak solved from this run: the difference is the weights estimate's"
                               if derived else ""))
    if facts.kv_cache_gib is not None:
        # Feed vLLM's own KV budget (measured or reserved) through our layout: isolates the block arithmetic
        # from budget errors.
        length = facts.max_concurrency_tokens or max_model_len
        cap = capacity(L, kv_cache_bytes=round(facts.kv_cache_gib * D.GIB), max_model_len=length)
        rows += [
            Comparison("GPU KV cache size", "tokens", cap.kv_cache_tokens, facts.kv_cache_tokens,
                       "predicted from the logged KV memory (rounded to 0.01 GiB)"),
            Comparison(f"max concurrency at {length} tokens", "x", round(cap.max_concurrency, 2),
                       facts.max_concurrency),
        ]
    return tuple(r for r in rows if r.logged is not None or r.predicted is not None)


def _settings_warnings(i: MemoryInputs, layout: KvLayout, facts: VllmFacts) -> list[str]:
    out = []
    run = facts.engine
    run_ssm = run.mamba_ssm_cache_dtype
    if layout.gdn and run_ssm and run_ssm != "auto" and run_ssm != layout.gdn.ssm_dtype:
        out.append(f"the run used mamba_ssm_cache_dtype={run_ssm} but the plan models {layout.gdn.ssm_dtype}")
    if run.max_model_len and i.max_model_len and run.max_model_len != i.max_model_len:
        out.append(f"the run used max_model_len={run.max_model_len} but the plan models {i.max_model_len}")
    if run.enable_prefix_caching is not None and run.enable_prefix_caching != i.prefix_caching:
        out.append(f"the run used enable_prefix_caching={run.enable_prefix_caching} but the plan models "
                   f"{'--prefix-caching' if i.prefix_caching else '--no-prefix-caching'}")
    version = facts.vllm_version or ""
    if version and not (version == i.vllm_version or version.startswith(i.vllm_version + ".")):
        out.append(f"the run used vLLM {version} but the plan applies vLLM {i.vllm_version}'s rules "
                   f"(--vllm-version)")
    if facts.device_kind == "cpu" and i.block_size is None and layout.gdn is not None:
        out.append(f"the run ran on CPU, where vLLM's default --block-size is {D.CPU_DEFAULT_BLOCK_SIZE_TOKENS} "
                   f"(the hybrid block is a multiple of it): pass --block-size {D.CPU_DEFAULT_BLOCK_SIZE_TOKENS}")
    return out


def _scratch(shape: ModelShape, cache: CacheSettings, layout: KvLayout, inputs: MemoryInputs,
             serving: ResolvedServing, gpu: GpuEntry | None, weights: WeightEstimate,
             facts: VllmFacts | None) -> ScratchCheck:
    """The scratch check; free memory = device total - weights (logged if the run has them) - runtime overhead."""
    loaded = facts.model_loading_gib if facts else None
    weights_in_use = _gib(loaded) if loaded is not None else weights.bytes_per_gpu
    free = None if gpu is None else gpu.total_bytes - weights_in_use - D.RUNTIME_OVERHEAD_BYTES
    free_source = ("" if gpu is None else f"{gpu.name} total - {'logged' if loaded else 'computed'} weights - "
                   f"{D.RUNTIME_OVERHEAD_BYTES / D.GIB:g} GiB assumed runtime overhead")
    smaller = None
    if layout.gdn and layout.gdn.ssm_dtype == "float32":
        smaller = kv_layout(shape, replace(cache, mamba_ssm_cache_dtype="bfloat16"))
    return scratch_check(layout, serving=serving, enforce_eager=inputs.enforce_eager,
                         vllm_version=inputs.vllm_version, gpu=gpu, free_bytes=free, free_source=free_source,
                         smaller_block_layout=smaller)


def _budget(inputs: MemoryInputs, gpu: GpuEntry, layout: KvLayout, weights: WeightEstimate,
            serving: ResolvedServing, facts: VllmFacts | None, max_len: int) -> Budget:
    """Weights from the config; activation peak and graph pool from the caller, else the run, else unknown."""
    w_item = BudgetItem("weights", weights.bytes_per_gpu, "config", weights.format)
    act = _item("activation peak + non-torch", inputs.activation_peak_gib, None,
                f"eager profile run at max_num_batched_tokens={serving.max_num_batched_tokens}")
    cg = _item("CUDA-graph pool estimate", inputs.cudagraph_pool_gib,
               facts.cudagraph_estimate_gib if facts else None, "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1")
    if inputs.enforce_eager:
        cg = BudgetItem("CUDA-graph pool estimate", 0, "config", "--enforce-eager: no graphs")
    if act.bytes is None and facts and None not in (facts.model_loading_gib, facts.available_kv_cache_gib):
        # vLLM: available = requested - weights - (peak + non-torch) - graph estimate, solved for the peak.
        requested = gpu.total_bytes * inputs.gpu_memory_utilization
        derived = requested - _gib(facts.model_loading_gib) - (cg.bytes or 0) - _gib(facts.available_kv_cache_gib)
        act = BudgetItem(act.name, max(0, int(derived)), "run",
                         "derived: requested - logged weights - graph estimate - logged available KV")
    return memory_budget(gpu=gpu, gpu_memory_utilization=inputs.gpu_memory_utilization, weights=w_item,
                         activation_peak=act, cudagraph_pool=cg, layout=layout, max_model_len=max_len)


def with_preset_engine(inputs: MemoryInputs) -> tuple[MemoryInputs, dict[str, str]]:
    """``inputs`` with each cache dtype left "auto" set as the preset named by ``--model`` runs it (its
    ``engine_defaults``: ``D.PRESET_ENGINE_DTYPES``; tiny-hybrid keeps its SSM state in float32), and where each
    came from (field -> "preset NAME (engine default KEY)"). A config path, or a dtype given, is left as it is."""
    from phaseprof.presets import UnknownPreset, load_preset  # noqa: PLC0415

    try:
        preset = load_preset(inputs.model)
    except (UnknownPreset, PhaseprofError):
        return inputs, {}
    engine = preset.engine_kwargs()
    changes, origin = {}, {}
    for key, fld in D.PRESET_ENGINE_DTYPES.items():
        if isinstance(engine.get(key), str) and getattr(inputs, fld) == "auto":
            changes[fld] = engine[key]
            origin[fld] = f"preset {preset.name} runs with {key} {engine[key]}"
    return dataclasses.replace(inputs, **changes), origin


def build_memory_plan(inputs: MemoryInputs, *, hf_config: dict[str, Any] | None = None) -> MemoryPlan:
    """Everything ``phaseprof memory`` reports. ``hf_config`` skips loading ``inputs.model`` (tests, dashboard)."""
    validate_inputs(inputs)
    config, source = (hf_config, inputs.model) if hf_config is not None else load_hf_config(inputs.model)
    check_hf_config(config, source)
    inputs, origin = with_preset_engine(inputs) if hf_config is None else (inputs, {})
    shape = shape_from_hf_config(config)
    cache = CacheSettings(inputs.vllm_version, inputs.kv_cache_dtype, inputs.mamba_cache_dtype, inputs.mamba_ssm_dtype,
                          inputs.tp, inputs.prefix_caching, inputs.block_size, inputs.num_speculative_tokens,
                          ssm_dtype_origin=origin.get("mamba_ssm_dtype", "--mamba-ssm-dtype"))
    layout = kv_layout(shape, cache)
    max_len = inputs.max_model_len or shape.max_position_embeddings or DEFAULT_MAX_MODEL_LEN_TOKENS
    request = request_cost(layout, inputs.tokens or max_len)
    weights = count_weights(shape, tp=inputs.tp)
    gpu = lookup_gpu(inputs.gpu) if inputs.gpu else custom_gpu(inputs.gpu_memory_gib) if inputs.gpu_memory_gib else None
    facts = load_run_facts(inputs.run_dir) if inputs.run_dir else None
    serving = resolve_serving(ServingSettings(inputs.max_num_seqs, inputs.max_num_batched_tokens,
                                              inputs.cudagraph_max_size, inputs.num_speculative_tokens,
                                              inputs.enforce_eager), gpu, inputs.vllm_version)
    scratch = _scratch(shape, cache, layout, inputs, serving, gpu, weights, facts)
    budget = _budget(inputs, gpu, layout, weights, serving, facts, max_len) if gpu is not None else None
    kv_budget = (capacity(layout, kv_cache_bytes=_gib(inputs.kv_budget_gib) or 0, max_model_len=max_len)
                 if inputs.kv_budget_gib else None)

    warnings: list[str] = []
    if scratch.exceeds_free:
        warnings.append(
            f"CUDA-graph scratch KV cache of {scratch.scratch_bytes / 1e9:.1f} GB ({scratch.num_tensors} x "
            f"{scratch.tensor_bytes / D.GIB:.2f} GiB) exceeds the ~{(scratch.free_bytes or 0) / D.GIB:.1f} GiB free "
            f"when vLLM allocates it: expect 'Tried to allocate {scratch.tensor_bytes / D.GIB:.2f} GiB' OOM; fixes: "
            + ", ".join(f.name for f in scratch.fixes if f.fits))
    if budget is not None and budget.capacity.max_concurrency < 1:
        warnings.append(f"the KV cache left ({budget.kv_cache_bytes / D.GIB:.2f} GiB) cannot hold one "
                        f"{max_len}-token request: vLLM refuses to start; lower --max-model-len")
    if layout.mamba_cache_mode == "align" and layout.block_size_tokens > serving.max_num_batched_tokens:
        warnings.append(f"prefix caching puts GDN state in 'align' mode, which needs block_size "
                        f"({layout.block_size_tokens}) <= max_num_batched_tokens ({serving.max_num_batched_tokens}): "
                        "vLLM fails its config check; raise --max-num-batched-tokens or disable prefix caching")
    comparisons: tuple[Comparison, ...] = ()
    if facts is not None:
        comparisons = _comparisons(layout, budget, weights, facts, max_len)
        warnings += _settings_warnings(inputs, layout, facts)
        if facts.is_empty:
            warnings.append(f"{facts.source}: holds none of vLLM's memory facts")
    plan = MemoryPlan(inputs, source, shape, cache, layout, max_len, request, weights, gpu, serving, scratch,
                      budget, kv_budget, facts, comparisons, tuple(warnings))
    _check_int64(plan, source)
    return plan


def _check_int64(plan: MemoryPlan, source: str) -> None:
    """Each config field is bounded on its own, but their products are not: 16M heads of head_dim 16M gave weight
    counts past 2^63, printed as JSON no int64 reader takes. One line naming the config and the first such
    number (a field path of the plan) instead."""
    def walk(v: Any, path: str) -> tuple[str, int] | None:
        if isinstance(v, bool):
            return None
        if isinstance(v, int):
            return (path, v) if abs(v) >= 1 << 63 else None
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            items = ((f.name, getattr(v, f.name)) for f in dataclasses.fields(v))
        elif isinstance(v, dict):
            items = ((str(k), x) for k, x in v.items())
        elif isinstance(v, (list, tuple)):
            items = ((str(i), x) for i, x in enumerate(v))
        else:
            return None
        for name, x in items:
            if (hit := walk(x, f"{path}.{name}" if path else name)) is not None:
                return hit
        return None

    if (hit := walk(plan, "")) is not None:
        raise PhaseprofError(f"{source}: its sizes multiply to {hit[0]} = {_short(hit[1])}, beyond a 64-bit "
                             "integer: no model this size exists (check its dims, heads, experts and layers)")
