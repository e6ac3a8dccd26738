"""Tensor/expert-parallel captures: N GPUs of one host, one trace per rank, through vLLM's OWN profiler.

With ``tensor_parallel_size > 1`` vLLM runs its workers in separate processes, so an in-process
``torch.profiler`` would only see the driver. vLLM's ``profiler_config={"profiler": "torch", ...}`` plus
``llm.start_profile()`` / ``stop_profile()`` makes every worker write its own ``*.pt.trace.json.gz`` with vLLM's
``execute_context_N(T)_generation_M(G)`` step annotations; ``phaseprof analyze RUN_DIR/ranks`` reads them as one
run (per-rank breakdowns, communication, load imbalance). NCCL's NVLink multicast stays off
(``NCCL_NVLS_ENABLE=0``): on shared hosts it can take the GPUs out of service.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console

from phaseprof.capture.inprocess.device import detect_device, versions
from phaseprof.capture.inprocess.engine import build_plan, engine_arg_fields, explain_engine_error, require_vllm
from phaseprof.capture.inprocess.models import check_device, check_tokens, default_model_name, resolve_model
from phaseprof.capture.shared.request import CaptureRequest, InProcess
from phaseprof.capture.shared.prompts import random_prompt
from phaseprof.capture.shared.record import capture_record
from phaseprof.capture.shared.rundir import (
    make_readable,
    run_dir_name,
    run_directory,
    unique_run_dir,
    utc_stamp,
)
from phaseprof.capture.shared.timing import summarize
from phaseprof.errors import EnvironmentProblem, PhaseprofError
from phaseprof.records import DeviceRecord, EngineInfo, ModelInfo, ParallelInfo, ProfileInfo, RunDir

MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
FLUSH_WAIT_S = 5.0  # workers write their traces asynchronously after stop_profile()


def gpu_count() -> int:
    try:
        import torch  # noqa: PLC0415

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:
        return 0


def check_gpus(tp: int, available: int) -> None:
    """One clear line when the machine has fewer GPUs than the run needs."""
    if tp < 1:
        raise PhaseprofError(f"--tensor-parallel-size must be at least 1, got {tp}")
    if available < tp:
        raise EnvironmentProblem(f"--tensor-parallel-size {tp} needs {tp} CUDA GPUs on this host; it has "
                                 f"{available}")


def parallel_kwargs(base: dict[str, Any], *, tp: int, ep: bool, profile_dir: Path, fields: set[str]) -> dict[str, Any]:
    """Engine kwargs for a TP/EP run that records one trace per rank with vLLM's profiler (pure)."""
    if "profiler_config" not in fields:
        raise EnvironmentProblem("this vLLM has no profiler_config (EngineArgs): per-rank traces need vLLM >= 0.23")
    kw = dict(base, tensor_parallel_size=tp, enable_expert_parallel=ep)
    kw["profiler_config"] = {"profiler": "torch", "torch_profiler_dir": str(profile_dir.resolve()),
                             "torch_profiler_with_stack": False, "torch_profiler_with_memory": True,
                             "torch_profiler_use_gzip": True}
    return kw


def _time(llm: Any, prompt: dict[str, Any], sp: Any, reps: int) -> list[float]:
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        llm.generate([prompt], sp, use_tqdm=False)
        out.append(time.perf_counter() - t)
    return out


def capture_parallel(request: CaptureRequest, *, console: Console) -> Path:
    """Run one TP/EP capture (``request``'s target is ``InProcess`` with ``parallel``: one phase, one prompt
    length) and write ``runs/<...>-tp<N>/`` with ``ranks/`` traces, ``run.json`` and one breakdown per rank. Clean
    timing is the host clock around ``llm.generate`` (request metrics live in the workers); decode TPOT =
    (t(N outputs) - t(1 output)) / (N - 1)."""
    target = request.target
    if not isinstance(target, InProcess) or not target.parallel:
        raise TypeError(f"a tensor-parallel capture of a request {request.where}")
    tp, ep = target.tensor_parallel_size, target.enable_expert_parallel
    opts = request.engine_options(cuda=True)
    cap = request.capture_options(request.workload.phase[0], request.workload.tokens[0])
    name = opts.model or default_model_name(True)
    argv = request.on_device(cuda=True, default_model=name).command()
    source = resolve_model(name)  # unknown preset fails before vLLM's slow import
    require_vllm()
    check_gpus(tp, gpu_count())
    device = detect_device()
    check_device(source, cuda_available=device.kind == "cuda")
    check_tokens(source, prompt_tokens=cap.prompt_tokens, output_tokens=cap.max_tokens, engine_args=opts.engine_args)
    os.environ.update(MULTICAST_OFF)
    from vllm import LLM, SamplingParams  # noqa: PLC0415

    fields = engine_arg_fields()
    plan = build_plan(source, replace(opts, model=name), device=device, fields=fields)
    os.environ.update(plan.env)
    tokens = f"{cap.label}-tp{tp}{'-ep' if ep else ''}"
    final = unique_run_dir(cap.out, run_dir_name(device_slug=f"{device.slug}x{tp}", model_slug=source.slug,
                                                 phase=cap.phase.value, tokens=tokens,
                                                 stamp=utc_stamp()))
    with run_directory(final) as tmp:
        ranks = tmp / "ranks"
        ranks.mkdir()
        kw = parallel_kwargs(plan.kwargs, tp=tp, ep=ep, profile_dir=ranks, fields=fields)
        with console.status(f"starting vLLM with tensor_parallel_size={tp}{' + expert parallel' if ep else ''} "
                            "(JIT compilation can take minutes) ...", spinner="dots"):
            t0 = time.perf_counter()
            try:
                llm = LLM(**kw)
            except Exception as e:  # noqa: BLE001
                raise explain_engine_error(e, plan) from e
            startup_s = time.perf_counter() - t0
        prompt = {"prompt_token_ids": random_prompt(cap.prompt_tokens, vocab_size=source.vocab_size, seed=cap.seed)}
        n_out = cap.max_tokens
        sp = SamplingParams(max_tokens=n_out, ignore_eos=True, detokenize=False, temperature=0.0)
        sp1 = SamplingParams(max_tokens=1, ignore_eos=True, detokenize=False, temperature=0.0)
        _time(llm, prompt, sp, max(cap.warmup, 1))
        first = summarize(_time(llm, prompt, sp1, cap.reps))
        timing: dict[str, Any] = {"source": "host clock around llm.generate", "ttft": first.to_dict()}
        full = None
        if n_out > 1:
            full = summarize(_time(llm, prompt, sp, cap.reps))
            timing["tpot"] = {"median_ms": (full.median_ms - first.median_ms) / (n_out - 1)}
        llm.start_profile()
        t = time.perf_counter()
        llm.generate([prompt], sp, use_tqdm=False)
        profiled_s = time.perf_counter() - t
        llm.stop_profile()
        time.sleep(FLUSH_WAIT_S)
        traces = sorted(p.name for p in ranks.glob("*.pt.trace.json*"))
        if len(traces) != tp:
            raise PhaseprofError(f"vLLM's profiler wrote {len(traces)} rank trace(s), expected {tp}", path=ranks)
        clean_s = (first if full is None else full).median_ms / 1e3
        capture_record(
            cap, None, argv=argv, mode=opts.mode.value, quant=str(opts.quant), ttft_ms=first.median_ms,
            tpot_ms=timing["tpot"]["median_ms"] if "tpot" in timing else None, versions=versions(),
            device=DeviceRecord(**device.to_dict()), model=ModelInfo.of_source(source),
            model_config=source.hf_config,
            engine=EngineInfo(kwargs={k: v for k, v in kw.items() if k != "profiler_config"}, env=plan.env,
                              notes=list(plan.notes), startup_s=round(startup_s, 3)),
            timing=timing, profile=ProfileInfo(overhead_ratio=profiled_s / clean_s if clean_s > 0 else None,
                                               overhead_definition="profiled / unprofiled host-clock time of "
                                                                   "llm.generate"),
            parallel=ParallelInfo(tensor_parallel_size=tp, expert_parallel=ep, rank_traces=tuple(traces)),
        ).write(RunDir(tmp).record_file)
        del llm
    make_readable(final)  # temp-dir files are created 0600; a run directory is meant to be shared
    return final
