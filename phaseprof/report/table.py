"""Rich terminal rendering of a Breakdown (rendering only: every number comes from the Breakdown)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from phaseprof.analysis.results import Breakdown, PhaseSummary
from phaseprof.defaults import NAME_WIDTH


def _ms(us: float) -> str:
    return f"{us / 1000:,.2f}"


def _short(name: str, width: int = NAME_WIDTH) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def phase_table(ph: PhaseSummary, *, view: str = "kernel", device: str = "gpu") -> Table:
    rows = ph.kernel_view if view == "kernel" else ph.module_view
    t = Table(title=f"{ph.phase}: {ph.steps} step(s), {view} view", title_justify="left")
    t.add_column("bucket")
    t.add_column("ms", justify="right")
    t.add_column("share %", justify="right")
    t.add_column("items", justify="right")
    for b in rows:
        t.add_row(b.bucket, _ms(b.time_us), f"{b.share_pct:.1f}", f"{b.count:,}")
    t.add_row("[bold]GPU busy[/]" if device == "gpu" else "[bold]CPU op time[/]", f"[bold]{_ms(ph.gpu_busy_us)}[/]", "100.0", f"{ph.kernels:,}")
    return t


def timeline_table(bd: Breakdown) -> Table:
    """Per phase: wall/busy/idle summed over steps, plus per-step means of the counts."""
    t = Table(title="time per phase (ms, summed over steps) and counts per step (mean)", title_justify="left")
    cols = ("phase", "steps", "wall", "busy", "busy%", "idle", "launch", "host", "other", "kern/st", "calls/st",
            "alloc/st", "malloc/st")
    for col in cols:
        t.add_column(col, justify="left" if col == "phase" else "right", no_wrap=True)
    for ph in bd.phases:
        s = ph.per_step
        t.add_row(ph.phase, str(ph.steps), _ms(ph.wall_us), _ms(ph.gpu_busy_us),
                  f"{100 * ph.gpu_busy_us / ph.wall_us:.1f}" if ph.wall_us else "-", _ms(ph.gpu_idle_us),
                  _ms(ph.idle.launch_overhead_us), _ms(ph.idle.host_work_us), _ms(ph.idle.other_us),
                  f"{s['kernels'].mean:,.0f}", f"{s['launch_calls'].mean:,.0f}", f"{s['allocations'].mean:,.0f}",
                  f"{s['device_mallocs'].mean:,.1f}")
    t.caption = ("busy = union of kernel/memcpy/memset time; idle = wall - busy, split into launch (host inside "
                 "launch calls), host (host doing other work) and other (queued, dependencies, tail)")
    return t


def print_breakdown(bd: Breakdown, console: Console, *, top: int = 3) -> None:
    """Print the headline, per-phase timeline and bucket tables, top kernels and unknowns."""
    tr = bd.trace
    console.print(f"[bold]{tr.path}[/]  {tr.gpu_name or tr.platform}  ({tr.device} trace, "
                  f"{tr.event_count:,} events)")
    console.print(f"steps: {bd.step_detection['detail']}")
    console.print(timeline_table(bd))
    for ph in bd.phases:
        console.print(phase_table(ph, view="kernel", device=tr.device))
        console.print(phase_table(ph, view="module", device=tr.device))
        kt = Table(title=f"{ph.phase}: top kernels per bucket", title_justify="left")
        for col in ("bucket", "kernel", "count", "ms", "share %"):
            kt.add_column(col, justify="right" if col in ("count", "ms", "share %") else "left",
                          no_wrap=col != "kernel", overflow="ellipsis")
        for b in ph.kernel_view:
            for k in ph.top_kernels.get(b.bucket, [])[:top]:
                kt.add_row(b.bucket, _short(k.name, 60), f"{k.count:,}", _ms(k.time_us), f"{k.share_pct:.1f}")
        console.print(kt)
    if bd.unknown_kernels:
        total = sum(k.time_us for k in bd.unknown_kernels)
        console.print(f"[yellow]{len(bd.unknown_kernels)} unclassified kernel name(s), {_ms(total)} ms "
                      f"(bucket 'unknown'; add a rule with --rules):[/]")
        for k in bd.unknown_kernels[:10]:
            console.print(f"  {_ms(k.time_us):>10} ms  x{k.count:<6} {_short(k.name)}")
    for n in bd.notes:
        console.print(f"[dim]note: {n}[/]")
    from phaseprof.report.attribution import print_attribution  # noqa: PLC0415

    print_attribution(bd, console)


def print_rank_summary(summary: "RankSummary", console: Console) -> None:  # noqa: F821 (import cycle-free hint)
    """Per-rank totals and per-step load imbalance of a multi-rank run."""
    t = Table(title=f"ranks ({len(summary.ranks)} of world size {summary.world_size})", title_justify="left")
    for col in ("rank", "GPU", "steps", "busy ms", "comm %", "comm overlapped %", "top bucket"):
        t.add_column(col, justify="left" if col in ("GPU", "top bucket") else "right", no_wrap=True)
    for r, bd in summary.ranks.items():
        top = max((b for ph in bd.phases for b in ph.kernel_view), key=lambda b: b.time_us, default=None)
        t.add_row(str(r), bd.trace.gpu_name or "-", str(len(bd.steps)), _ms(bd.totals["gpu_busy_us"]),
                  f"{summary.communication_share_pct[r]:.1f}", f"{summary.communication_overlap_pct[r]:.1f}",
                  f"{top.bucket} {top.share_pct:.0f}%" if top else "-")
    console.print(t)
    if summary.steps and len(summary.ranks) > 1:
        s = Table(title="load imbalance per step (compute = GPU busy minus communication kernels)",
                  title_justify="left")
        ranks = list(summary.ranks)
        for col in ("step", *(f"r{r} compute ms" for r in ranks), *(f"r{r} comm ms" for r in ranks),
                    "slowest", "spread ms", "spread %"):
            s.add_column(col, justify="right", no_wrap=True)
        for st in summary.steps:
            s.add_row(str(st.step), *(_ms(st.compute_us_by_rank[r]) for r in ranks),
                      *(_ms(st.communication_us_by_rank[r]) for r in ranks), f"rank {st.slowest_rank}",
                      _ms(st.spread_us), f"{st.spread_pct:.1f}")
        console.print(s)
    for w in summary.warnings:
        console.print(f"[yellow]warning:[/] {w}")
