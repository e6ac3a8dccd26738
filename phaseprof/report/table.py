"""Rich terminal rendering of a Breakdown (rendering only: every number comes from the Breakdown).

Every table fits the console width with headers and numbers whole (``phaseprof.report.fit``).
"""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Console
from rich.table import Table

from phaseprof.analysis.results import Breakdown, PhaseSummary
from phaseprof.report.fit import Col, fitted_tables, print_fitted


def _ms(us: float) -> str:
    return f"{us / 1000:,.2f}"


def phase_rows(ph: PhaseSummary, *, view: str = "kernel", device: str = "gpu") -> list[list[str]]:
    """Bucket rows of one view, then the total (GPU busy, or CPU op time on a CPU trace)."""
    rows = [[b.bucket, _ms(b.time_us), f"{b.share_pct:.1f}", f"{b.count:,}"]
            for b in (ph.kernel_view if view == "kernel" else ph.module_view)]
    total = "GPU busy" if device == "gpu" else "CPU op time"
    rows.append([f"[bold]{total}[/]", f"[bold]{_ms(ph.gpu_busy_us)}[/]", "100.0", f"{ph.kernels:,}"])
    return rows


_BUCKET_COLS = (Col("bucket", "left"), Col("ms"), Col("share %"), Col("items"))


def phase_table(ph: PhaseSummary, *, view: str = "kernel", device: str = "gpu", width: int = 80) -> list[Table]:
    """One phase's buckets in one view (split only if ``width`` is below the four columns' need)."""
    rows = phase_rows(ph, view=view, device=device)
    return fitted_tables(f"{ph.phase}: {ph.steps} step(s), {view} view", _BUCKET_COLS, rows, width=width,
                         sections=(len(rows) - 2,))


#: Rows of the per-phase summary: label, then how to read the value off a PhaseSummary.
_TIMELINE_ROWS: tuple[tuple[str, Callable[[PhaseSummary], str]], ...] = (
    ("steps", lambda ph: str(ph.steps)),
    ("wall ms", lambda ph: _ms(ph.wall_us)),
    ("busy ms", lambda ph: _ms(ph.gpu_busy_us)),
    ("busy % of wall", lambda ph: f"{100 * ph.gpu_busy_us / ph.wall_us:.1f}" if ph.wall_us else "-"),
    ("idle ms", lambda ph: _ms(ph.gpu_idle_us)),
    ("  in launch ms", lambda ph: _ms(ph.idle.launch_overhead_us)),
    ("  host work ms", lambda ph: _ms(ph.idle.host_work_us)),
    ("  other ms", lambda ph: _ms(ph.idle.other_us)),
    ("kernels/step", lambda ph: f"{ph.per_step['kernels'].mean:,.0f}"),
    ("launch calls/step", lambda ph: f"{ph.per_step['launch_calls'].mean:,.0f}"),
    ("allocations/step", lambda ph: f"{ph.per_step['allocations'].mean:,.0f}"),
    ("dev. mallocs/step", lambda ph: f"{ph.per_step['device_mallocs'].mean:,.1f}"),
)


TIMELINE_NOTE = ("ms summed over steps, counts per step (mean). busy = union of kernel/memcpy/memset time; idle "
                 "= wall - busy, split into launch (host inside launch calls), host (host doing other work) and "
                 "other (queued, dependencies, tail)")


def timeline_table(bd: Breakdown, *, width: int = 80) -> list[Table]:
    """Per phase (a column each): wall/busy/idle summed over steps, plus per-step means of the counts
    (``TIMELINE_NOTE`` says so; it is printed under the table at full width, not squeezed into a caption).

    Metrics are rows so the table is as narrow as its phases; with many phases it splits into parts.
    """
    cols = [Col("metric", "left")] + [Col(ph.phase) for ph in bd.phases]
    rows = [[label] + [get(ph) for ph in bd.phases] for label, get in _TIMELINE_ROWS]
    return fitted_tables("per phase", cols, rows, width=width, sections=(0, 7))


def top_kernels_table(ph: PhaseSummary, *, top: int = 3, width: int = 80) -> list[Table]:
    """The ``top`` kernels of each bucket, grouped under a bucket row; full names, folded when long."""
    cols = (Col("bucket / kernel", "left", fold=True), Col("count"), Col("ms"), Col("share %"))
    rows: list[list[str]] = []
    sections: list[int] = []
    for b in ph.kernel_view:
        kernels = ph.top_kernels.get(b.bucket, [])[:top]
        if not kernels:
            continue
        rows.append([f"[bold]{b.bucket}[/]", "", "", ""])
        rows += [[k.name, f"{k.count:,}", _ms(k.time_us), f"{k.share_pct:.1f}"] for k in kernels]
        sections.append(len(rows) - 1)
    return fitted_tables(f"{ph.phase}: top kernels per bucket", cols, rows, width=width, sections=sections[:-1])


def print_breakdown(bd: Breakdown, console: Console, *, top: int = 3) -> None:
    """Print the headline, per-phase timeline and bucket tables, top kernels and unknowns."""
    tr = bd.trace
    w = console.width
    console.print(f"[bold]{tr.path}[/]  {tr.gpu_name or tr.platform}  ({tr.device} trace, "
                  f"{tr.event_count:,} events)")
    console.print(f"steps: {bd.step_detection['detail']}")
    for t in timeline_table(bd, width=w):
        console.print(t)
    console.print(f"[dim]{TIMELINE_NOTE}[/]")
    for ph in bd.phases:
        for t in (*phase_table(ph, view="kernel", device=tr.device, width=w),
                  *phase_table(ph, view="module", device=tr.device, width=w),
                  *top_kernels_table(ph, top=top, width=w)):
            console.print(t)
    if bd.unknown_kernels:
        total = sum(k.time_us for k in bd.unknown_kernels)
        console.print(f"[yellow]{len(bd.unknown_kernels)} unclassified kernel name(s), {_ms(total)} ms "
                      f"(bucket 'unknown'; add a rule with --rules):[/]")
        for k in bd.unknown_kernels[:10]:
            console.print(f"  {_ms(k.time_us):>10} ms  x{k.count:<6} {k.name}")
    for n in bd.notes:
        console.print(f"[dim]note: {n}[/]")
    from phaseprof.report.attribution import print_attribution  # noqa: PLC0415

    print_attribution(bd, console)
    if bd.sol is not None:
        from phaseprof.sol.render import print_sol

        print_sol(bd.sol, console)


def print_rank_summary(summary: "RankSummary", console: Console) -> None:  # noqa: F821 (import cycle-free hint)
    """Per-rank totals and per-step load imbalance of a multi-rank run."""
    cols = [Col("rank"), Col("GPU", "left"), Col("steps"), Col("busy ms"), Col("comm %"),
            Col("comm overlapped %"), Col("top bucket", "left")]
    rows = []
    for r, bd in summary.ranks.items():
        top = max((b for ph in bd.phases for b in ph.kernel_view), key=lambda b: b.time_us, default=None)
        rows.append([str(r), bd.trace.gpu_name or "-", str(len(bd.steps)), _ms(bd.totals["gpu_busy_us"]),
                     f"{summary.communication_share_pct[r]:.1f}", f"{summary.communication_overlap_pct[r]:.1f}",
                     f"{top.bucket} {top.share_pct:.0f}%" if top else "-"])
    print_fitted(console, f"ranks ({len(summary.ranks)} of world size {summary.world_size})", cols, rows)
    if summary.steps and len(summary.ranks) > 1:
        ranks = list(summary.ranks)
        cols = [Col(c) for c in ("step", *(f"r{r} compute ms" for r in ranks), *(f"r{r} comm ms" for r in ranks),
                                 "slowest", "spread ms", "spread %")]
        rows = [[str(st.step), *(_ms(st.compute_us_by_rank[r]) for r in ranks),
                 *(_ms(st.communication_us_by_rank[r]) for r in ranks), f"rank {st.slowest_rank}",
                 _ms(st.spread_us), f"{st.spread_pct:.1f}"] for st in summary.steps]
        print_fitted(console, "load imbalance per step (compute = GPU busy minus communication kernels)", cols,
                     rows)
    for w in summary.warnings:
        console.print(f"[yellow]warning:[/] {w}")
