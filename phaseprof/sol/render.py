"""Terminal and markdown rendering of the ``sol`` section (rendering only: every number is in the section)."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table

from phaseprof.render.fit import Col, print_fitted
from phaseprof.safe_text import terminal
from phaseprof.analysis.sol_results import SolBucket, SolPhase, SolSection


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}"


def ceiling_line(s: SolSection) -> str:
    c = s.ceiling
    if c is None:
        return f"speed of light: {s.status}"
    return (f"speed of light on {c.gpu} ({c.kind}): {c.precision} {c.tflops:,.0f} TFLOP/s, {c.hbm_tbps:g} TB/s, "
            f"ridge {c.ridge_flop_per_byte:.0f} FLOP/B")


def model_line(s: SolSection) -> str:
    return f"model {s.model} ({s.model_source}); ceiling source: {s.ceiling.source if s.ceiling else '-'}"


def phase_line(p: SolPhase) -> str:
    n = max(p.steps, 1)
    return (f"{p.phase}/step ms: floor {p.floor_us / n / 1e3:,.2f}, busy {p.gpu_busy_us / n / 1e3:,.2f} "
            f"({_pct(p.pct_of_light_busy)}% of light), wall {p.wall_us / n / 1e3:,.2f} "
            f"({_pct(p.pct_of_light_wall)}%)")


_SOL_COLS = (("bucket", "left"), ("GFLOP", "right"), ("GB", "right"), ("TF/s", "right"), ("TB/s", "right"),
             ("bound", "left"), ("floor", "right"), ("ms", "right"), ("%", "right"))
SOL_CAPTION = "TF/s, TB/s achieved; floor: SOL ms; %: floor / ms; !: an assumption broke"


def _pct_flag(b: SolBucket) -> str:
    return _pct(b.pct_of_light) + ("!" if b.beats_floor else "")


def sol_rows(p: SolPhase) -> list[list[str]]:
    """One phase's buckets: work, achieved, binding resource, floor vs measured (display strings)."""
    return [[str(b.bucket), f"{b.flops / 1e9:,.1f}", f"{b.bytes / 1e9:,.2f}", f"{b.achieved_tflops:,.1f}",
             f"{b.achieved_tbps:.2f}", "mem" if b.bound == "memory" else "comp", f"{b.floor_us / 1e3:,.2f}",
             f"{b.time_us / 1e3:,.2f}", _pct_flag(b)] for b in p.buckets]


def print_sol(s: SolSection, console: Console) -> None:
    """``s`` must arrive sanitised (``safe_text.for_terminal``, as ``print_breakdown``'s breakdown does)."""
    if not s.ok:
        console.print(f"[dim]{ceiling_line(s)}" + (f" ({'; '.join(s.notes)})" if s.notes else "")
                      + "[/]")
        return
    console.print(ceiling_line(s))
    console.print(f"[dim]{model_line(s)}[/]")
    if s.routing:
        console.print(f"[dim]MoE routing: {s.routing}[/]")
    for p in s.phases:
        print_fitted(console, f"{p.phase}: speed of light per bucket (summed over {p.steps} step(s))",
                     [Col(h, j) for h, j in _SOL_COLS], sol_rows(p), caption=SOL_CAPTION, compact=True)
        console.print(phase_line(p))
    for n in s.notes:
        console.print(f"[dim]note: {n}[/]")


def sol_markdown(s: SolSection) -> list[str]:
    """Markdown lines for a breakdown report. Its text carries names from the trace, the breakdown and the model
    config (GPU, model, phases, buckets, notes): each line's text goes through ``safe_text.markdown``."""
    from phaseprof.safe_text import markdown  # noqa: PLC0415

    out = ["", "**Speed of light** — " + markdown(ceiling_line(s).removeprefix("speed of light").lstrip(": "))]
    if not s.ok:
        return out
    out += ["", markdown(model_line(s))]
    for p in s.phases:
        out += ["", f"*{markdown(phase_line(p))}*", "", "| bucket | GFLOP | GB | TFLOP/s | TB/s | bound | floor ms | "
                "ms | % of light |", "|---|--:|--:|--:|--:|---|--:|--:|--:|"]
        for b in p.buckets:
            out.append(f"| {markdown(b.bucket)} | {b.flops / 1e9:,.1f} | {b.bytes / 1e9:,.2f} | "
                       f"{b.achieved_tflops:,.1f} | {b.achieved_tbps:.2f} | {markdown(b.bound)} | "
                       f"{b.floor_us / 1e3:,.2f} | {b.time_us / 1e3:,.2f} | {_pct_flag(b)} |")
    out += [""] + [f"- {markdown(n)}" for n in s.assumptions + s.notes]
    return out


_MOE_COLS = (("layer", "right"), ("experts", "right"), ("max/mean", "right"), ("gini", "right"),
             ("hottest", "left"), ("floor", "right"), ("bal. floor", "right"), ("ms", "right"),
             ("bal. ms", "right"), ("skew ms", "right"))
MOE_CAPTION = ("experts: distinct experts touched (mean per step); max/mean: hottest expert's tokens over the "
               "balanced load; floor / bal. floor: routed experts' SOL as routed and with the same tokens "
               "balanced; ms: measured MoE time of the layer (module tree); bal. ms: at the same efficiency "
               "balanced; skew ms = ms - bal. ms (negative: the skew saved weight reads)")


def moe_layer_rows(s: SolSection, phase: str) -> list[list[str]]:
    """One phase's MoE layers with measured routing (display strings; '-' where no module tree timed them)."""
    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v / 1e3:,.3f}"
    return [[str(r.layer), f"{r.distinct_experts:.1f}", f"{r.max_over_mean:.2f}", f"{r.gini:.2f}",
             " ".join(str(e) for e in r.hottest), ms(r.floor_us), ms(r.balanced_floor_us), ms(r.time_us),
             ms(r.balanced_us), ms(r.imbalance_us)] for r in s.moe_layers if r.phase == phase]


def print_moe_layers(s: SolSection, console: Console) -> None:
    """Per MoE layer: measured routing and its imbalance cost (``--by layer``), or why there is none."""
    if not s.ok or s.routing is None:
        return
    if not s.moe_layers:
        console.print(f"[dim]MoE per layer: routing {s.routing}; per-layer routing needs a capture that "
                      "recorded it (routing.npz)[/]")
        return
    for phase in dict.fromkeys(r.phase for r in s.moe_layers):
        print_fitted(console, f"{phase}: MoE routing per layer (measured, summed over steps)",
                     [Col(h, j) for h, j in _MOE_COLS], moe_layer_rows(s, phase), caption=MOE_CAPTION)


def print_shape_check(check, why: str, console: Console) -> None:  # noqa: ANN001
    """The model's GEMM FLOPs beside the FLOPs of the shapes the trace recorded."""
    if check is None:
        console.print(f"[dim]shape cross-check: {terminal(why)}[/]")
        return
    t = Table(title=f"GEMM FLOPs: recorded shapes vs work model ({check.steps} step(s))", title_justify="left",
              box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("component", "calls", "shapes GFLOP", "model GFLOP", "diff %"):
        t.add_column(col, justify="left" if col == "component" else "right", no_wrap=True)
    for r in check.rows:
        t.add_row(r.component, str(r.calls), f"{r.shape_flops / 1e9:,.2f}", f"{r.model_flops / 1e9:,.2f}",
                  f"{r.diff_pct:+.1f}")
    if check.unmatched_calls:
        t.caption = (f"{check.unmatched_calls} GEMM call(s), {check.unmatched_flops / 1e9:,.2f} GFLOP, match no "
                     "projection of the model")
    console.print(t)
