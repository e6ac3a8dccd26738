"""Who-waits-for-whom tables (terminal, 80 columns) and markdown, from a MultiRankReport. No numbers computed
here beyond unit conversion."""

from __future__ import annotations

from rich.console import Console

from phaseprof.render.fit import Col, print_fitted
from phaseprof.safe_text import terminal
from phaseprof.scale.expert_parallel import CombineTracking, ExpertParallelReport
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


_EP_COLS = ("step", "rank", "MoE", "d.wait", "d.xfer", "c.wait", "c.xfer", "max")


def _ep_rows(ep: ExpertParallelReport) -> list[list[str]]:
    rows = []
    for s in ep.steps:
        for r in sorted(s.moe_us_by_rank):
            rows.append([str(s.step), str(r), _ms(s.moe_us_by_rank[r]), _ms(s.dispatch_wait_us_by_rank[r]),
                         _ms(s.dispatch_transfer_us_by_rank[r]), _ms(s.combine_wait_us_by_rank[r]),
                         _ms(s.combine_transfer_us_by_rank[r]), "*" if r == s.busiest_rank else ""])
    return rows


def _r_text(r: float | None, n: int) -> str:
    return f"r = {r:.2f} ({n} points)" if r is not None else f"r: n/a ({n} points)"


def _tracking_lines(t: CombineTracking) -> list[str]:
    return [f"combine: the last rank to arrive ran the most MoE before it in {t.late_is_busiest} of "
            f"{t.combine_instances} instances",
            "others' combine wait vs their MoE deficit to the busiest rank: per instance "
            f"{_r_text(t.instance_wait_vs_moe_gap_r, t.instance_points)}, per step "
            f"{_r_text(t.step_wait_vs_moe_gap_r, t.step_points)}",
            f"MoE deficits can account for {t.moe_explains_pct:.1f}% of all combine wait "
            f"({_ms(t.moe_gap_covers_us)} of {_ms(t.combine_wait_us)} ms); the rest is the late rank's other work"]


def _ep_head(ep: ExpertParallelReport) -> str:
    how = ", ".join(f"{k} {v}" for k, v in ep.how.items())
    return f"{ep.summary}: {how}" if ep.found else ep.summary


def print_expert_parallel(ep: ExpertParallelReport | None, console: Console) -> None:
    if ep is None:
        return
    if not ep.found:
        console.print(terminal(f"expert parallel: {_ep_head(ep)}"))
    else:
        console.print(terminal(_ep_head(ep)))
        print_fitted(console, "per step and rank (ms)", [Col(h) for h in _EP_COLS], _ep_rows(ep), keys=2)
        console.print("[dim]MoE = the rank's MoE kernels (kernel view); d./c. = EP dispatch/combine; wait = "
                      "inside the collective before the last rank arrived, xfer = the rest; max = most MoE "
                      "compute in the step[/]")
        if ep.tracking is not None:
            for line in _tracking_lines(ep.tracking):
                console.print(terminal(line))
    for n in ep.notes:
        console.print(f"[dim]{terminal(n)}[/]")


_RANK_COLS = ("rank", "waited ms", "transfer ms", "late ×", "late by ms", "why late")
_STEP_COLS = ("step", "colls", "late rank", "late by ms", "compute", "launch", "host")


def _busy(report: MultiRankReport) -> dict[int, float]:
    return {line.rank: line.gpu_busy_us for line in report.ranks}


#: What each wait column means (``scale.waits``): printed under the tables, in every view.
WAIT_TERMS = ("late by = summed over the collectives a rank reached last, last arrival - first arrival; "
              "early = last arrival - its own arrival, for the others; waited = the part of early spent inside "
              "its collective kernel (the rest: its kernel had already ended); c.wait = the part of waited spent "
              "in EP combines")


def print_collectives(report: MultiRankReport, console: Console) -> None:
    c = report.collectives
    if c is None:
        return
    from phaseprof.scale.waits import rank_verdicts, waterfall_lines  # noqa: PLC0415

    for r, line in rank_verdicts(c, _busy(report)).items():
        console.print(terminal(f"rank {r}: {line}"))
    ranks, steps = _rows(report)
    families = ", ".join(f"{terminal(k)} {v}" for k, v in sorted(c.instances_by_family.items()))
    print_fitted(console, f"collectives: {c.matched_instances} matched instances ({families})",
                 [Col(h, "left" if h == "why late" else "right") for h in _RANK_COLS], ranks)
    print_fitted(console, "per step: the rank the others waited for, and what it was doing (ms)",
                 [Col(h) for h in _STEP_COLS], steps)
    console.print("[dim]waited = inside a collective kernel before the last rank arrived; transfer = the rest. "
                  f"{terminal(c.clock)}[/]")
    print_expert_parallel(c.expert_parallel, console)
    console.print("how the waits add up (ms):")
    for line in waterfall_lines(c, _busy(report)):
        console.print(terminal(line))
    console.print(f"[dim]{terminal(WAIT_TERMS)}[/]")


def collectives_markdown(report: MultiRankReport) -> str:
    from phaseprof.safe_text import markdown  # noqa: PLC0415 - warnings and notes name files and kernels

    out = [f"# Multi-rank report (world size {report.world_size})", ""]
    for w in report.warnings:
        out.append(f"- warning: {markdown(w)}")
    if report.collectives is None:
        out.append("No collective kernel ran on every rank.")
        return "\n".join(out) + "\n"
    from phaseprof.scale.waits import rank_verdicts, waterfall_lines  # noqa: PLC0415

    out += [f"- rank {r}: {markdown(line)}" for r, line in rank_verdicts(report.collectives, _busy(report)).items()]
    ranks, steps = _rows(report)
    for cols, rows in ((_RANK_COLS, ranks), (_STEP_COLS, steps)):
        out += ["", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        out += ["| " + " | ".join(r) + " |" for r in rows]
    out += ["", markdown(report.collectives.clock)]
    ep = report.collectives.expert_parallel
    if ep is not None:
        out += ["", "## Expert parallel", "", _ep_head(ep)]
        if ep.found:
            out += ["", "| " + " | ".join(_EP_COLS) + " |", "|" + "---|" * len(_EP_COLS)]
            out += ["| " + " | ".join(r) + " |" for r in _ep_rows(ep)]
            if ep.tracking is not None:
                out += [""] + [f"- {line}" for line in _tracking_lines(ep.tracking)]
        out += [f"- {markdown(n)}" for n in ep.notes]
    out += ["", "## How the waits add up (ms)", ""]
    out += [f"- {markdown(line.strip())}" for line in waterfall_lines(report.collectives, _busy(report))]
    out += ["", markdown(WAIT_TERMS)]
    return "\n".join(out) + "\n"
