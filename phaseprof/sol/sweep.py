"""Speed of light across a sweep: the floor of one prefill of each length vs its measured TTFT, and of one
decode step at each concurrency vs the measured TPOT (no trace needed: the floor is the model's work on the
GPU's ceiling). A decode point's sequences are taken at their mean KV length over the generation
(prompt + output / 2). TTFT also holds scheduling, sampling and the host; the floor is the GPU's part only."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich import box
from rich.console import Console
from rich.table import Table

from phaseprof.errors import PhaseprofError
from phaseprof.records import SweepRecord
from phaseprof.safe_text import terminal
from phaseprof.sol.ceilings import Ceiling, choose_ceiling
from phaseprof.sol.model import SolModel
from phaseprof.sol.work import StepTokens, step_work


@dataclass(frozen=True)
class SweepFloor:
    x: int  # prompt tokens (prefill sweep) or concurrency (decode sweep)
    floor_ms: float
    measured_ms: float  # median TTFT or TPOT
    pct_of_light: float


def step_floor_ms(model: SolModel, tokens: StepTokens, ceiling: Ceiling) -> float:
    """Sum over components of max(FLOPs / peak, bytes / bandwidth), in ms."""
    total = 0.0
    for w in step_work(model, tokens).values():
        total += max(w.flops / (ceiling.tflops(model.compute) * 1e12), w.bytes / (ceiling.hbm_tbps * 1e12))
    return total * 1e3


def sweep_floors(rec: SweepRecord, model: SolModel, ceiling: Ceiling) -> list[SweepFloor]:
    out = []
    for p in rec.points:
        stats, x = p.stats(rec.y_key), rec.x_of(p)
        tokens = (p.prompt_tokens, p.output_tokens) if rec.phase == "decode" else (p.prompt_tokens,)
        if stats is None or x is None or None in tokens:
            raise PhaseprofError(f"a {rec.phase} sweep point without its {rec.x_key}, token counts or {rec.y_key}")
        if rec.phase == "prefill":
            tok = StepTokens((p.prompt_tokens,))
        else:
            tok = StepTokens(decode_kv_lens=(p.prompt_tokens + p.output_tokens // 2,) * x)
        f = step_floor_ms(model, tok, ceiling)
        out.append(SweepFloor(x, f, stats.median_ms, 100.0 * f / stats.median_ms if stats.median_ms else 0.0))
    return out


def print_sweep_sol(rec: SweepRecord, console: Console, *, model_config: str | None = None,
                    ceilings: str | Path | None = None, source: str | Path | None = None) -> None:
    """The floor table of a sweep, or one dim line saying what is missing. ``source``: the sweep's directory
    (a measured ceilings file above it is used, as for breakdowns)."""
    from phaseprof.sol.attach import find_measured, find_model

    model, where = find_model((rec,), model_config)
    gpu = rec.device.gpu_name or rec.device.name  # a served sweep: the GPU learned behind its URL, if any
    near = find_measured(source, gpu) if ceilings is None else None
    ceiling, warn = choose_ceiling(gpu, ceilings=ceilings, near=near)
    if model is None or ceiling is None:
        why = "needs --model-config" if model is None else f"no ceilings for {gpu}"
        console.print(f"[dim]speed of light: {terminal(why)}[/]")
        return
    prefill = rec.phase == "prefill"
    t = Table(title=f"speed of light vs measured {'TTFT' if prefill else 'TPOT'}", title_justify="left",
              box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("prompt tokens" if prefill else "concurrency", "floor ms", "measured ms", "% of light"):
        t.add_column(col, justify="right", no_wrap=True)
    for f in sweep_floors(rec, model, ceiling):
        t.add_row(str(f.x), f"{f.floor_ms:,.2f}", f"{f.measured_ms:,.2f}", f"{f.pct_of_light:.0f}")
    t.caption = terminal(f"model {model.name} ({where})" + (f"; {warn}" if warn else ""))
    console.print(t)
    via = f"; GPU from {rec.device.gpu_source}" if rec.device.kind == "server" and rec.device.gpu_source else ""
    console.print(f"[dim]ceilings: {terminal(ceiling.label)}, {terminal(ceiling.source)}{terminal(via)}[/]")

