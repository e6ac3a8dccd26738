"""Prefill/decode disaggregation, planned (a model, labelled as one): x prefill + y decode instances built from a
prefill-only sweep (TTFT at the decode sweep's prompt length) and decode-only sweeps (TPOT per concurrency),
with each request's KV + GDN-state handoff over a link from the ceilings catalogue (``sol/links.py``).

Per request, ``handoff``: the attention KV blocks vLLM holds for the prompt (whole blocks of the unified
block size, every attention layer: ``memory.kv_plan.request_cost``) plus every GDN layer's conv and SSM state
(``KvLayout.gdn``, unpadded) — the seed-004 arithmetic — per GPU of the engine (tensor-parallel shards move in
parallel, one link each). Throughput: ``DisaggPoint``'s docstring."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from pathlib import Path

import msgspec

from phaseprof.errors import PhaseprofError
from phaseprof.memory.kv_plan import KvLayout, request_cost
from phaseprof.pareto.build import MAX_COUNT, MAX_RATE, Sweep, frontier_indices, sweep_layout, sweep_record
from phaseprof.pareto.records import DisaggPoint, Handoff, ParetoReport
from phaseprof.sol.links import Link, link_by_name


#: Instances per side ``--max-instances`` may ask for (a rack's worth of GPUs per side).
MAX_INSTANCES = 64
#: Modelled x·P + y·D points one report may hold (each is a row of the JSON output: 200,000 are ~110 MB of JSON,
#: ~2 s).
MAX_MODELLED_POINTS = 200_000


def check_max_instances(max_instances: int) -> None:
    """--max-instances is from 1 to ``MAX_INSTANCES`` (checked before any sweep is read)."""
    if not 1 <= max_instances <= MAX_INSTANCES:
        raise PhaseprofError(f"--max-instances must be from 1 to {MAX_INSTANCES}, got {str(max_instances)[:20]}")


def handoff(layout: KvLayout, prompt_tokens: int, link: Link) -> Handoff:
    """The bytes one request of ``prompt_tokens`` hands over and their time on ``link``."""
    cost = request_cost(layout, prompt_tokens)
    g = layout.gdn
    conv, ssm = (g.conv_bytes, g.ssm_bytes) if g is not None else (0, 0)
    gdn_bytes = (conv + ssm) * layout.num_gdn_layers
    total = cost.attention_bytes + gdn_bytes
    return Handoff(prompt_tokens=prompt_tokens, block_size_tokens=layout.block_size_tokens,
                   attention_blocks_per_layer=cost.attention_blocks_per_layer,
                   attention_layers=layout.num_attention_layers, block_bytes=layout.page_bytes,
                   attention_bytes=cost.attention_bytes, gdn_layers=layout.num_gdn_layers,
                   conv_bytes_per_layer=conv, ssm_bytes_per_layer=ssm, gdn_bytes=gdn_bytes, bytes=total,
                   link=link.name, link_gb_per_s=link.gb_per_s, link_source=link.source,
                   transfer_ms=total / (link.gb_per_s * 1e9) * 1e3)


def _prefill_ttft_ms(path: str | Path, prompt_tokens: int) -> tuple[float, int]:
    """(TTFT median ms at ``prompt_tokens``, GPUs of that engine) from a prefill sweep directory."""
    rec, f = sweep_record(path, phase="prefill", prefix="--disagg: ",
                          wrong_phase="--disagg takes a prefill sweep (phaseprof sweep --phase prefill)")
    for point in rec.points:
        if point.prompt_tokens == prompt_tokens and point.ttft is not None:
            world = rec.engine.world_size or 1
            ttft = point.ttft.median_ms
            if not (isinstance(ttft, (int, float)) and math.isfinite(ttft) and 0 < ttft <= MAX_RATE):
                raise PhaseprofError(f"--disagg: the {prompt_tokens}-token point's TTFT median {str(ttft)[:40]} "
                                     "ms is not a time (more than 0)", path=f)
            if not 1 <= world <= MAX_COUNT:
                raise PhaseprofError(f"--disagg: engine world_size {world} is not a number of GPUs", path=f)
            return float(ttft), int(world)
    have = ", ".join(str(x.prompt_tokens) for x in rec.points)
    raise PhaseprofError(f"--disagg: the prefill sweep has no {prompt_tokens}-token point (the decode sweeps' "
                         f"prompt length; it has {have})", path=f)


def add_disagg(report: ParetoReport, sweeps: Sequence[Sweep], labels: Sequence[str], *, prefill: str | Path,
               link: str, max_instances: int) -> ParetoReport:
    """``report`` with the modelled x·P + y·D points of every decode sweep and their frontier."""
    check_max_instances(max_instances)
    modelled = sum(len(s.metrics) for s in sweeps) * max_instances ** 2
    if modelled > MAX_MODELLED_POINTS:
        raise PhaseprofError(f"--disagg: {sum(len(s.metrics) for s in sweeps):,} decode points x "
                             f"{max_instances}x{max_instances} instance pairs = {modelled:,} modelled points, over "
                             f"the limit of {MAX_MODELLED_POINTS:,}: give a lower --max-instances")
    ln = link_by_name(link)
    lengths = {s.metrics[0].prompt_tokens for s in sweeps}
    if len(lengths) != 1:
        raise PhaseprofError(f"--disagg: the decode sweeps have different prompt lengths ({sorted(lengths)})")
    isl = lengths.pop()
    ttft_ms, p_gpus = _prefill_ttft_ms(prefill, isl)
    layout, why = sweep_layout(sweeps[0].record)
    if layout is None:
        return msgspec.structs.replace(report, disagg_note=f"no handoff model: {why}")
    try:
        h = handoff(layout, isl, ln)
    except (ValueError, ZeroDivisionError, OverflowError) as e:  # a layout of a hostile model config
        return msgspec.structs.replace(report, disagg_note=f"no handoff model: {str(e)[:200] or type(e).__name__}")
    bd = {(p.config, p.concurrency): p.breakdown for p in report.points}
    out: list[DisaggPoint] = []
    for s, label in zip(sweeps, labels):
        for m in s.metrics:
            d_rate = m.concurrency / (m.output_tokens * m.tpot.p50_ms / 1e3)  # requests/s of one D instance
            for x, y in itertools.product(range(1, max_instances + 1), repeat=2):
                bounds = {"prefill": x * 1e3 / ttft_ms, "decode": y * d_rate,
                          "link": x * ln.gb_per_s * 1e9 / h.bytes if h.bytes else float("inf")}
                bound = min(bounds, key=bounds.__getitem__)
                rate = bounds[bound]
                gpus = x * p_gpus + y * m.world_size
                out.append(DisaggPoint(
                    config=label, prefill_instances=x, decode_instances=y, prefill_gpus=x * p_gpus,
                    decode_gpus=y * m.world_size, decode_concurrency=m.concurrency, requests_per_s=rate,
                    tps_per_gpu=rate * (m.prompt_tokens + m.output_tokens) / gpus, tps_per_user=m.tps_per_user,
                    ttft_ms=ttft_ms + h.transfer_ms, transfer_ms_per_request=h.transfer_ms, bound=bound,
                    breakdown=bd.get((label, m.concurrency))))
    front = [out[i] for i in frontier_indices([(p.tps_per_gpu, p.tps_per_user) for p in out])]
    return msgspec.structs.replace(report, disaggregated=out, disagg_frontier=front, handoff=h)
