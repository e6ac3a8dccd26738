"""Who-waits-for-whom tables (terminal, 80 columns) and markdown, from a MultiRankReport. No numbers computed
here beyond unit conversion."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from phaseprof.report.fit import Col, print_fitted
from phaseprof.scale.report import MultiRankReport

_CAUSES = (("compute", "compute_us"), ("launch", "launch_overhead_us"), ("host", "host_work_us"))


def _ms(us: float) -> str:
    return f"{us / 1000:,.2f}"


def _rows(report: MultiRankReport) -> tuple[list[list[str]], list[list[str]]]:
    c = report.collectives
    assert c is not None
    ranks = [[str(r), _ms(c.wait_us_by_rank[r]), _ms(c.transfer_us_by_rank[r]), str(c.late_count_by_rank[r]),
              _ms(c.lateness_us_by_rank[r]), c.cause_by_rank[r].main] for r in sorted(c.wait_us_by_rank)]
    steps = [[str(s.step), str(s.instances), "-" if s.late_rank is None else str(s.late_rank),
              _ms(s.lateness_us_by_rank.get(s.late_rank, 0.0)) if s.late_rank is not None else "-",
              *(_ms(getattr(s.late_cause, f)) for _, f in _CAUSES)] for s in c.steps]
    return ranks, steps


_RANK_COLS = ("rank", "waited ms", "transfer ms", "late ×", "late by ms", "why late")
_STEP_COLS = ("step", "colls", "late rank", "late by ms", "compute", "launch", "host")


def print_collectives(report: MultiRankReport, console: Console) -> None:
    c = report.collectives
    if c is None:
        return
    ranks, steps = _rows(report)
    families = ", ".join(f"{escape(k)} {v}" for k, v in sorted(c.instances_by_family.items()))
    print_fitted(console, f"collectives: {c.matched_instances} matched instances ({families})",
                 [Col(h, "left" if h == "why late" else "right") for h in _RANK_COLS], ranks)
    print_fitted(console, "per step: the rank the others waited for, and what it was doing (ms)",
                 [Col(h) for h in _STEP_COLS], steps)
    console.print("[dim]waited = inside a collective kernel before the last rank arrived; transfer = the rest. "
                  f"{escape(c.clock)}[/]")


def collectives_markdown(report: MultiRankReport) -> str:
    out = [f"# Multi-rank report (world size {report.world_size})", ""]
    for w in report.warnings:
        out.append(f"- warning: {w}")
    if report.collectives is None:
        out.append("No collective kernel ran on every rank.")
        return "\n".join(out) + "\n"
    ranks, steps = _rows(report)
    for cols, rows in ((_RANK_COLS, ranks), (_STEP_COLS, steps)):
        out += ["", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        out += ["| " + " | ".join(r) + " |" for r in rows]
    out += ["", report.collectives.clock]
    return "\n".join(out) + "\n"
