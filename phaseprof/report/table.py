"""Rich terminal rendering of a Breakdown (rendering only: every number comes from the Breakdown and
``analysis.digest``), meant to be read in a minute: verdicts first, per-step means, short kernel names.

Every table fits the console width with headers and numbers whole (``phaseprof.render.fit``).
"""

from __future__ import annotations

import re

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from phaseprof.analysis.digest import per_step, top_kernels
from phaseprof.analysis.results import Breakdown, PhaseSummary
from phaseprof.render.sums import fit_sum
from phaseprof.render.fit import Col, cell_len, fitted_tables, print_fitted
from phaseprof.report.short_names import MAX_CHARS, short_names


def _ms(us: float) -> str:
    return f"{us / 1000:,.2f}"


def _busy_label(device: str) -> str:
    return "GPU busy" if device == "gpu" else "CPU op time"


def phase_rows(ph: PhaseSummary, *, device: str = "gpu") -> list[list[str]]:
    """Buckets of both views side by side (ms per step, % of busy), then the total (GPU busy, or CPU op time)."""
    busy_ms = per_step(ph, ph.gpu_busy_us) / 1e3

    def printed(view: Sequence[Any]) -> dict[str, tuple[str, str]]:
        # each column adds up to the total row as printed (render.sums.fit_sum: largest remainder)
        ms = fit_sum([per_step(ph, b.time_us) / 1e3 for b in view], busy_ms, ndigits=2)
        pct = fit_sum([b.share_pct for b in view], 100.0, ndigits=1)
        return {b.bucket: (f"{m:,.2f}", f"{p:.1f}") for b, m, p in zip(view, ms, pct)}

    kv, mv = printed(ph.kernel_view), printed(ph.module_view)
    names = list(kv) + [b for b in mv if b not in kv]
    rows = [[n, *kv.get(n, ("-", "-")), *mv.get(n, ("-", "-"))] for n in names]
    busy = f"{round(busy_ms, 2):,.2f}"
    rows.append([f"[bold]{_busy_label(device)}[/]", f"[bold]{busy}[/]", "100.0", f"[bold]{busy}[/]", "100.0"])
    return rows


_BUCKET_COLS = (Col("bucket", "left"), Col("kernel ms"), Col("%"), Col("module ms"), Col("%"))


def phase_table(ph: PhaseSummary, *, device: str = "gpu", width: int = 80) -> list[Table]:
    """One phase's buckets in the kernel view (what ran) beside the module view (what it ran for), per step."""
    rows = phase_rows(ph, device=device)
    cols = _BUCKET_COLS if device == "gpu" else (Col("bucket", "left"), Col("op ms"), Col("%"), Col("module ms"),
                                                  Col("%"))
    return fitted_tables(f"{ph.phase}: buckets (ms/step, % of {'busy' if device == 'gpu' else 'op time'})",
                         cols, rows, width=width, compact=True)


def _split(ph: PhaseSummary) -> tuple[str, ...]:
    """Per-step wall = busy + idle, idle = launch + host work + queued/tail, as printed (ms, 2 decimals): each sum
    adds up on paper (``render.sums.fit_sum``)."""
    s = ph.per_step
    wall = round(s["wall_us"].mean / 1e3, 2)
    busy, idle = fit_sum([s["gpu_busy_us"].mean / 1e3, s["gpu_idle_us"].mean / 1e3], wall, ndigits=2)
    parts = fit_sum([s["launch_overhead_us"].mean / 1e3, s["host_work_us"].mean / 1e3,
                     per_step(ph, ph.idle.other_us) / 1e3], idle, ndigits=2)
    return tuple(f"{v:,.2f}" for v in (wall, busy, idle, *parts))


#: Rows of the per-phase summary: label, how to read the value off a PhaseSummary, and whether the row means
#: anything on a CPU-only trace (launch calls, device mallocs and the launch share of idle do not).
_TIMELINE_ROWS: tuple[tuple[str, Callable[[PhaseSummary], str], bool], ...] = (
    ("steps", lambda ph: str(ph.steps), True),
    ("wall ms", lambda ph: _split(ph)[0], True),
    ("busy ms", lambda ph: _split(ph)[1], True),
    ("busy % of wall", lambda ph: f"{100 * ph.gpu_busy_us / ph.wall_us:.1f}" if ph.wall_us else "-", True),
    ("idle ms", lambda ph: _split(ph)[2], True),
    ("  in launch ms", lambda ph: _split(ph)[3], False),
    ("  host work ms", lambda ph: _split(ph)[4], False),
    ("  queued/tail ms", lambda ph: _split(ph)[5], False),
    ("kernels", lambda ph: f"{ph.per_step['kernels'].mean:,.0f}", True),
    ("launch calls", lambda ph: f"{ph.per_step['launch_calls'].mean:,.0f}", False),
    ("allocations", lambda ph: f"{ph.per_step['allocations'].mean:,.0f}", True),
    ("dev. mallocs", lambda ph: f"{ph.per_step['device_mallocs'].mean:,.1f}", False),
    ("wall ms, total", lambda ph: _ms(ph.wall_us), True),
)
_CPU_LABELS = {"busy ms": "CPU op ms", "busy % of wall": "ops % of wall", "idle ms": "between ops ms",
               "kernels": "ops"}

TIMELINE_NOTE = ("means per step. busy: kernels+copies+sets; idle: launch = host in launch calls, host work = "
                 "host elsewhere, queued/tail = launched, not started")
CPU_TIMELINE_NOTE = "means per step; CPU op ms = self time of CPU ops; between ops = host code outside any op"


def timeline_table(bd: Breakdown, *, width: int = 80) -> list[Table]:
    """Per phase (a column each): per-step means of wall, busy, idle and the counts, and the phase's wall total
    (``TIMELINE_NOTE`` says so; printed under the table at full width, not squeezed into a caption).

    Metrics are rows so the table is as narrow as its phases; with many phases it splits into parts.
    """
    gpu = bd.trace.device == "gpu"
    shown = [(label if gpu else _CPU_LABELS.get(label, label), get) for label, get, on_cpu in _TIMELINE_ROWS
             if gpu or on_cpu]
    cols = [Col("per step", "left")] + [Col(ph.phase) for ph in bd.phases]
    rows = [[label] + [get(ph) for ph in bd.phases] for label, get in shown]
    return fitted_tables("", cols, rows, width=width, compact=True)  # the header row says it all


def _short(names: Iterable[str], *, max_chars: int = MAX_CHARS) -> dict[str, str]:
    """Short names of names already made terminal-safe (``safe_text.for_terminal``): shortened as the reader
    sees them (markup escapes undone), then escaped again, so a cut never leaves a ``[`` without its escape."""
    raw = {n: Text.from_markup(n).plain for n in names}
    short = short_names(raw.values(), max_chars=max_chars)
    return {n: escape(short[r]) for n, r in raw.items()}


def top_kernels_table(ph: PhaseSummary, *, full_names: bool = False, width: int = 80,
                      device: str = "gpu") -> list[Table]:
    """The phase's kernels of at least ``MIN_KERNEL_SHARE_PCT`` of its busy time, by bucket (buckets largest
    first; the bucket named on its first row), and one row summing the rest; counts and ms per step. Short
    names, unique in the table and as wide as the other columns leave room for, unless ``full_names``: whole
    names, folded."""
    top = top_kernels(ph)
    rows: list[list[str]] = []
    for b in ph.kernel_view:
        ks = [k for k in top.kernels if k.bucket == b.bucket]
        rows += [[b.bucket if i == 0 else "", k.name, f"{per_step(ph, k.count):,.0f}",
                  _ms(per_step(ph, k.time_us)), f"{k.share_pct:.1f}"] for i, k in enumerate(ks)]
    if top.rest_count:
        rows.append(["", f"the rest, each < {top.min_share_pct:g}%", f"{per_step(ph, top.rest_count):,.0f}",
                     _ms(per_step(ph, top.rest_time_us)), f"{top.rest_share_pct:.1f}"])
    item = "kernel" if device == "gpu" else "CPU op"
    cols = (Col("bucket", "left"), Col(item, "left", fold=True), Col("n"), Col("ms"), Col("%"))
    if not full_names:
        # a compact table costs 3 cells per column but 1 at its edges: what is left is the name's
        room = width - (3 * len(cols) - 1) - sum(max(len(c.header), *(cell_len(r[i]) for r in rows))
                                                 for i, c in enumerate(cols) if i != 1) if rows else width
        names = _short((k.name for k in top.kernels), max_chars=room)
        if any("#" in n for n in names.values()):  # leave room for the "#n" of alike names
            names = _short((k.name for k in top.kernels), max_chars=room - 2)
        rows = [[r[0], names.get(r[1], r[1]), *r[2:]] for r in rows]
    of = "busy" if device == "gpu" else "op time"
    return fitted_tables(f"{ph.phase}: top {item}s (n and ms per step, % of {of})", cols, rows, width=width,
                         compact=True)


def path_lines(path: str, width: int) -> list[str]:
    """``path`` in lines of at most ``width`` cells, each break after a ``/`` (a name longer than a line is cut
    where it must)."""
    lines: list[str] = []
    for part in re.split(r"(?<=/)", path):
        if lines and cell_len(lines[-1] + part) <= width:
            lines[-1] += part
        else:
            lines += [part[i:i + width] for i in range(0, max(len(part), 1), width)]
    return lines


def print_breakdown(bd: Breakdown, console: Console, *, full_names: bool = False) -> None:
    """Print the headline and verdicts, the per-phase timeline, bucket tables, top kernels, unknowns, notes,
    attribution and speed of light. Every number comes from the breakdown (``verdicts``, ``analysis.digest``)."""
    tr = bd.trace
    w = console.width
    what = f"{tr.gpu_name or tr.platform}  ({tr.device} trace, {tr.event_count:,} events)"
    if cell_len(f"{tr.path}  {what}") <= w:
        console.print(f"[bold]{tr.path}[/]  {what}")
    else:  # a path is never broken mid-name: broken after a "/", what it is after its last part when it fits
        *head, last = path_lines(tr.path, w)
        for line in head:
            console.print(f"[bold]{line}[/]", soft_wrap=True)
        if cell_len(f"{last}  {what}") <= w:
            console.print(f"[bold]{last}[/]  {what}")
        else:
            console.print(f"[bold]{last}[/]", soft_wrap=True)
            console.print(what)
    console.print(f"steps: {bd.step_detection['detail']}")
    verdicts = bd.verdicts
    for v in verdicts.phases if verdicts else ():
        console.print(f"[bold]{v.line}[/]")
    for n in verdicts.noise if verdicts else ():
        console.print(f"[yellow]warning: {n}[/]")
    for t in timeline_table(bd, width=w):
        console.print(t)
    console.print(f"[dim]{TIMELINE_NOTE if tr.device == 'gpu' else CPU_TIMELINE_NOTE}[/]")
    views = {v.phase: v.views for v in verdicts.phases} if verdicts else {}
    for ph in bd.phases:
        for t in phase_table(ph, device=tr.device, width=w):
            console.print(t)
        for n in views.get(ph.phase, ()):
            console.print(f"[dim]{n}[/]")
        for t in top_kernels_table(ph, full_names=full_names, width=w, device=tr.device):
            console.print(t)
    if bd.unknown_kernels:
        total = sum(k.time_us for k in bd.unknown_kernels)
        console.print(f"[yellow]{len(bd.unknown_kernels)} unclassified kernel name(s), {_ms(total)} ms in all "
                      f"steps (bucket 'unknown'; add a rule with --rules):[/]")
        shown = bd.unknown_kernels[:10]
        names = {k.name: k.name for k in shown} if full_names else _short(k.name for k in shown)
        for k in shown:
            console.print(f"  {_ms(k.time_us):>10} ms  x{k.count:<6} {names[k.name]}")
    for n in bd.notes:
        console.print(f"[dim]note: {n}[/]")
    for n in bd.profiler.lines() if bd.profiler is not None else ():
        console.print(f"[dim]{n}[/]")
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
