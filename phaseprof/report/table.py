"""Rich terminal rendering of a Breakdown (rendering only: every number comes from the Breakdown)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from phaseprof.analysis.results import Breakdown, PhaseSummary
from phaseprof.defaults import NAME_WIDTH


def _ms(us: float) -> str:
    return f"{us / 1000:,.3f}"


def _short(name: str, width: int = NAME_WIDTH) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def phase_table(ph: PhaseSummary, *, view: str = "kernel") -> Table:
    rows = ph.kernel_view if view == "kernel" else ph.module_view
    t = Table(title=f"{ph.phase}: {ph.steps} step(s), {view} view", title_justify="left")
    t.add_column("bucket")
    t.add_column("ms", justify="right")
    t.add_column("share %", justify="right")
    t.add_column("items", justify="right")
    for b in rows:
        t.add_row(b.bucket, _ms(b.time_us), f"{b.share_pct:.1f}", f"{b.count:,}")
    t.add_row("[bold]GPU busy[/]", f"[bold]{_ms(ph.gpu_busy_us)}[/]", "100.0", f"{ph.kernels:,}")
    return t


def timeline_table(bd: Breakdown) -> Table:
    t = Table(title="per phase: wall, busy, idle (sum over steps; per-step mean in the JSON)", title_justify="left")
    for col in ("phase", "steps", "wall ms", "GPU busy ms", "busy %", "idle ms", "launch ovh ms", "host work ms",
                "other idle ms", "kernels/step", "launch calls/step", "allocs/step", "mallocs/step"):
        t.add_column(col, justify="right" if col != "phase" else "left")
    for ph in bd.phases:
        s = ph.per_step
        t.add_row(ph.phase, str(ph.steps), _ms(ph.wall_us), _ms(ph.gpu_busy_us),
                  f"{100 * ph.gpu_busy_us / ph.wall_us:.1f}" if ph.wall_us else "-", _ms(ph.gpu_idle_us),
                  _ms(ph.idle.launch_overhead_us), _ms(ph.idle.host_work_us), _ms(ph.idle.other_us),
                  f"{s['kernels'].mean:,.0f}", f"{s['launch_calls'].mean:,.0f}", f"{s['allocations'].mean:,.0f}",
                  f"{s['device_mallocs'].mean:,.1f}")
    return t


def print_breakdown(bd: Breakdown, console: Console, *, top: int = 3) -> None:
    """Print the headline, per-phase timeline and bucket tables, top kernels and unknowns."""
    tr = bd.trace
    console.print(f"[bold]{tr.path}[/]  {tr.gpu_name or tr.platform}  ({tr.device} trace, "
                  f"{tr.event_count:,} events)")
    console.print(f"steps: {bd.step_detection['detail']}")
    console.print(timeline_table(bd))
    for ph in bd.phases:
        console.print(phase_table(ph, view="kernel"))
        console.print(phase_table(ph, view="module"))
        kt = Table(title=f"{ph.phase}: top kernels per bucket", title_justify="left")
        for col in ("bucket", "kernel", "count", "ms", "share %"):
            kt.add_column(col, justify="right" if col in ("count", "ms", "share %") else "left")
        for b in ph.kernel_view:
            for k in ph.top_kernels.get(b.bucket, [])[:top]:
                kt.add_row(b.bucket, _short(k.name), f"{k.count:,}", _ms(k.time_us), f"{k.share_pct:.1f}")
        console.print(kt)
    if bd.unknown_kernels:
        total = sum(k.time_us for k in bd.unknown_kernels)
        console.print(f"[yellow]{len(bd.unknown_kernels)} unclassified kernel name(s), {_ms(total)} ms "
                      f"(bucket 'unknown'; add a rule with --rules):[/]")
        for k in bd.unknown_kernels[:10]:
            console.print(f"  {_ms(k.time_us):>10} ms  x{k.count:<6} {_short(k.name)}")
    for n in bd.notes:
        console.print(f"[dim]note: {n}[/]")
