"""Rendering of a breakdown's attribution section: coverage by method, per-layer table (rendering only)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from phaseprof.analysis.attribution_types import Attribution, Method, PhaseAttribution
from phaseprof.analysis.results import Breakdown
from phaseprof.render.fit import Col, fitted_tables
from phaseprof.safe_text import markdown

_SHORT = {Method.OP_STACK.value: "op stack", Method.MODULE_TREE.value: "modules",
          Method.GRAPH_ALIGNMENT.value: "graph align", Method.STRUCTURAL.value: "layer plan",
          Method.BRACKETED.value: "bracketed",
          Method.KERNEL_NAME.value: "kernel name"}
#: Buckets shown as columns of the layer table, in this order; the rest are summed into "rest". ``mlp`` (a dense
#: feed-forward) only where a layer has one: MoE models would show an empty column.
LAYER_COLUMNS = ("gdn", "attention", "moe", "norm")
DENSE_COLUMN = "mlp"


def _ms(us: float) -> str:
    return f"{us / 1000:,.2f}"


def coverage_line(pa: PhaseAttribution) -> str:
    """One line: how the phase's module view was attributed, in % of its GPU time."""
    parts = [f"{_SHORT[m]} {pa.coverage_pct.get(m, 0.0):.1f}%" for m in _SHORT if pa.coverage_pct.get(m, 0.0) > 0]
    return f"{pa.phase} module view from: " + (", ".join(parts) or "-")




def layer_tables(pa: PhaseAttribution, *, width: int = 80) -> list[Table]:
    """Layers x buckets (ms summed over the phase's steps), as wide as ``width`` allows: split into parts
    (layer and type repeated) rather than cut."""
    shown = LAYER_COLUMNS + ((DENSE_COLUMN,) if any(DENSE_COLUMN in r.by_bucket_us for r in pa.layers) else ())
    cols = (Col("layer"), Col("type", "left"), Col("ms"), Col("%"), *(Col(b) for b in shown), Col("rest"))
    rows = []
    for r in pa.layers:
        rest = sum(v for b, v in r.by_bucket_us.items() if b not in shown)
        rows.append([str(r.layer), r.layer_type.replace("attention", "attn"), _ms(r.time_us), f"{r.share_pct:.1f}",
                     *(_ms(r.by_bucket_us[b]) if b in r.by_bucket_us else "-" for b in shown), _ms(rest)])
    return fitted_tables(f"{pa.phase}: per layer (ms in all steps)", cols, rows, width=width, keys=2,
                         caption=f"outside decoder layers: {_ms(pa.outside_layers_us)} ms", compact=True)


def print_attribution(bd: Breakdown, console: Console, *, by_layer: bool = False) -> None:
    """Mode, inferred phases and coverage lines; the per-layer tables with ``by_layer`` (``--by layer``)."""
    a: Attribution | None = bd.attribution
    if a is None:
        return
    console.print(f"mode: {a.mode} ({a.mode_evidence})")
    for ip in a.inferred_phases[:8]:
        console.print(f"[dim]step {ip.step}: {ip.phase} (inferred from {ip.evidence})[/]")
    if len(a.inferred_phases) > 8:
        console.print(f"[dim]... {len(a.inferred_phases) - 8} more inferred steps[/]")
    modules = f"{a.module_calls:,} nn.Module calls" if a.module_calls else "no nn.Module events (no with_stack)"
    replay = "" if a.graph_alignment.startswith("no graph-replayed") else f"; graph replay: {a.graph_alignment}"
    console.print(f"attribution: {modules}{replay}")
    for pa in a.phases:
        console.print(coverage_line(pa))
    if by_layer:
        print_layers(bd, console)


def print_layers(bd: Breakdown, console: Console) -> None:
    """The layers x buckets table of each phase, or why there is none."""
    a = bd.attribution
    if a is not None:
        if not any(pa.layers for pa in a.phases):
            console.print("[yellow]no per-layer view: the trace has no decoder-layer nn.Module events "
                          "(record it with_stack, e.g. vLLM's own profiler)[/]")
        for pa in a.phases:
            for t in layer_tables(pa, width=console.width) if pa.layers else ():
                console.print(t)


def attribution_markdown(bd: Breakdown, *, by_layer: bool = True) -> str:
    """Markdown of the same: coverage per phase, then a layers x buckets table per phase."""
    a = bd.attribution
    if a is None:
        return ""
    out = ["", f"**attribution** — mode: {markdown(a.mode)} ({markdown(a.mode_evidence)}); "
           f"{a.module_calls:,} nn.Module calls; graph replay: {markdown(a.graph_alignment)}", "",
           "| phase | " + " | ".join(_SHORT.values()) + " |", "|---|" + "--:|" * len(_SHORT)]
    for pa in a.phases:
        out.append(f"| {markdown(pa.phase)} | " + " | ".join(f"{pa.coverage_pct.get(m, 0.0):.1f}%" for m in _SHORT) + " |")
    if by_layer:
        for pa in a.phases:
            if not pa.layers:
                continue
            out += ["", f"<details><summary>{markdown(pa.phase)}: per layer (ms)</summary>", "",
                    "| layer | type | ms | % | " + " | ".join(LAYER_COLUMNS) + " | rest |",
                    "|--:|---|--:|--:|" + "--:|" * (len(LAYER_COLUMNS) + 1)]
            for r in pa.layers:
                rest = sum(v for b, v in r.by_bucket_us.items() if b not in LAYER_COLUMNS)
                cells = [_ms(r.by_bucket_us[b]) if b in r.by_bucket_us else "-" for b in LAYER_COLUMNS]
                out.append(f"| {r.layer} | {markdown(r.layer_type)} | {_ms(r.time_us)} | {r.share_pct:.1f} | "
                           + " | ".join(cells) + f" | {_ms(rest)} |")
            out += ["", "</details>"]
    return "\n".join(out) + "\n"
