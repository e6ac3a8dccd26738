"""The pareto report as a terminal table or markdown (numbers as ``build`` computed them; strings from files
made safe here: ``safe_text.terminal`` / ``safe_text.markdown``)."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table

from phaseprof.pareto.records import ParetoPoint, ParetoReport
from phaseprof.safe_text import markdown, terminal


#: Rows a terminal table shows at most (a 20,000-point sweep is not read row by row; rich takes ~1 ms a row).
MAX_TABLE_ROWS = 500


def _f(v: float | None, fmt: str = ",.1f") -> str:
    return "-" if v is None else format(v, fmt)


def _sol(p: ParetoPoint) -> str:
    return "-" if p.sol is None else f"{p.sol.pct_of_light:.0f}%"


#: What the point table's last columns mean (printed under it).
POINT_TERMS = ("%SOL: speed-of-light TPOT / measured TPOT, on the ceiling named per configuration above; wall: "
               "'ok' (under) or 'over' the configuration's capacity wall (its max conc.), '-' without one; prof: a "
               "profiled breakdown of the point (listed below)")


def _wall(over: bool | None) -> str:
    return "-" if over is None else "over" if over else "ok"


def _ids(report: ParetoReport) -> dict[str, str]:
    """A short id per configuration (A, B, ...) so the point rows stay one line at 80 columns."""
    letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    return {c.config: letters[i] if i < len(letters) else str(i + 1) for i, c in enumerate(report.configs)}


def print_report(report: ParetoReport, console: Console) -> None:
    """Configurations with their capacity wall, then every point (frontier points marked *), then where the
    breakdowns are."""
    ids = _ids(report)
    t = Table(title="configurations", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1))
    for col in ("id", "config", "GPUs", "async", "ISL/OSL", "max conc.", "vLLM max conc."):
        t.add_column(col, justify="left" if col in ("id", "config") else "right", overflow="fold")
    for c in report.configs:
        cap = c.capacity
        said = "-" if cap is None or cap.vllm_max_concurrency is None else \
            f"{cap.vllm_max_concurrency:,.2f} (plan {_f(cap.plan_at_vllm_tokens, ',.2f')})"
        t.add_row(ids[c.config], terminal(c.config), str(c.world_size),
                  {True: "on", False: "off"}.get(c.async_scheduling, "?"), f"{c.prompt_tokens}/{c.output_tokens}",
                  "-" if cap is None else str(cap.max_concurrency), said)
    console.print(t)
    for c in report.configs:
        if c.ceiling:
            console.print(f"[dim]{ids[c.config]}: %SOL on {terminal(c.ceiling)}, {terminal(c.ceiling_source or '?')}; "
                          f"GPU from {terminal(c.gpu_source or '?')}[/]")
        for note in (c.capacity_note, c.sol_note):
            if note:
                console.print(f"[dim]{ids[c.config]}: {terminal(note)}[/]")
    front = {(f.config, f.concurrency) for f in report.frontier}
    t = Table(title="points (* = on the frontier)", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
              padding=(0, 1))
    for col in ("", "id", "c", "tok/s/GPU", "tok/s/user", "TPOT ms", "TTFT ms", "%SOL", "wall", "prof"):
        t.add_column(col, justify="left" if col in ("", "id", "wall", "prof") else "right", no_wrap=True)
    # frontier points first, at most MAX_TABLE_ROWS rows, in (config, concurrency) order
    shown = sorted(report.points, key=lambda p: ((p.config, p.concurrency) not in front, ids[p.config],
                                                  p.concurrency))[:MAX_TABLE_ROWS]
    for p in sorted(shown, key=lambda p: (ids[p.config], p.concurrency)):
        t.add_row("*" if (p.config, p.concurrency) in front else "", ids[p.config], str(p.concurrency),
                  _f(p.tps_per_gpu), _f(p.tps_per_user), _f(p.tpot_p50_ms, ",.2f"), _f(p.ttft_p50_ms, ",.0f"),
                  _sol(p), _wall(p.over_capacity), "yes" if p.breakdown else "")
    console.print(t)
    if len(report.points) > len(shown):
        console.print(f"[dim]{len(report.points) - len(shown):,} more points not shown (a table of "
                      f"{MAX_TABLE_ROWS} rows at most; all of them: --format json or markdown)[/]")
    console.print(f"[dim]{POINT_TERMS}[/]")
    for p in report.points:
        if p.breakdown:
            console.print(f"profile {ids[p.config]} c={p.concurrency}: {terminal(p.breakdown)}", soft_wrap=True)
    console.print(f"[dim]tok/s/GPU: {terminal(report.tps_per_gpu_definition)}; tok/s/user: "
                  f"{terminal(report.tps_per_user_definition)}[/]")
    if report.disagg_note:
        console.print(f"disaggregated: {terminal(report.disagg_note)}")
    if report.handoff is not None:
        h = report.handoff
        t = Table(title=f"disaggregated frontier (a MODEL: x prefill + y decode instances; handoff "
                        f"{h.bytes / 1e6:,.2f} MB per request over {terminal(h.link)}, {h.transfer_ms:.3f} ms)",
                  title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1))
        for col in ("id", "xP+yD", "GPUs", "D conc.", "tok/s/GPU", "tok/s/user", "TTFT ms", "bound"):
            t.add_column(col, justify="left" if col in ("id", "bound") else "right", no_wrap=True)
        for d in report.disagg_frontier[:MAX_TABLE_ROWS]:
            t.add_row(ids.get(d.config, terminal(d.config)), f"{d.prefill_instances}P+{d.decode_instances}D",
                      str(d.prefill_gpus + d.decode_gpus), str(d.decode_concurrency), _f(d.tps_per_gpu),
                      _f(d.tps_per_user), _f(d.ttft_ms, ".2f"), d.bound)
        console.print(t)
        if len(report.disagg_frontier) > MAX_TABLE_ROWS:
            console.print(f"[dim]{len(report.disagg_frontier) - MAX_TABLE_ROWS:,} more frontier points not shown "
                          "(--format json or markdown)[/]")


def report_markdown(report: ParetoReport) -> str:
    """The frontier and every point as markdown tables, for a PR."""
    lines = ["## Pareto frontier", "", "| config | concurrency | tok/s/GPU | tok/s/user | % of light | breakdown |",
             "|---|---:|---:|---:|---:|---|"]
    for f in report.frontier:
        lines.append(f"| {markdown(f.config)} | {f.concurrency} | {_f(f.tps_per_gpu)} | {_f(f.tps_per_user)} | "
                     f"{'-' if f.sol is None else f'{f.sol.pct_of_light:.0f}%'} | {markdown(f.breakdown or '-')} |")
    lines += ["", "## Configurations", "", "| config | GPUs | ISL/OSL | max concurrency (memory plan) | notes |",
              "|---|---:|---:|---:|---|"]
    for c in report.configs:
        sol = f"%SOL on {c.ceiling}, {c.ceiling_source}; GPU from {c.gpu_source}" if c.ceiling else None
        notes = "; ".join(markdown(n) for n in (sol, c.capacity_note, c.sol_note) if n) or "-"
        wall = "-" if c.capacity is None else str(c.capacity.max_concurrency)
        lines.append(f"| {markdown(c.config)} | {c.world_size} | {c.prompt_tokens}/{c.output_tokens} | {wall} | "
                     f"{notes} |")
    lines += ["", "## Points", "",
              "| config | concurrency | tok/s/GPU | tok/s/user | TPOT ms | over capacity | dominated by | breakdown |",
              "|---|---:|---:|---:|---:|---|---|---|"]
    for p in sorted(report.points, key=lambda p: (p.config, p.concurrency)):
        lines.append(f"| {markdown(p.config)} | {p.concurrency} | {_f(p.tps_per_gpu)} | {_f(p.tps_per_user)} | "
                     f"{_f(p.tpot_p50_ms, '.2f')} | {'yes' if p.over_capacity else ''} | "
                     f"{markdown(p.dominated_by or '-')} | {markdown(p.breakdown or '-')} |")
    if report.handoff is not None:
        h = report.handoff
        lines += ["", "## Disaggregated (a model)", "",
                  f"Handoff per request: {h.bytes:,} bytes over {markdown(h.link)} = {h.transfer_ms:.3f} ms.", "",
                  "| config | prefill GPUs | decode GPUs | decode concurrency | tok/s/GPU | tok/s/user | bound |",
                  "|---|---:|---:|---:|---:|---:|---|"]
        for d in report.disagg_frontier:
            lines.append(f"| {markdown(d.config)} | {d.prefill_gpus} | {d.decode_gpus} | {d.decode_concurrency} | "
                         f"{_f(d.tps_per_gpu)} | {_f(d.tps_per_user)} | {d.bound} |")
    lines += ["", f"tok/s/GPU: {markdown(report.tps_per_gpu_definition)}. "
                  f"tok/s/user: {markdown(report.tps_per_user_definition)}.", ""]
    return "\n".join(lines)
