"""``phaseprof diff A B``: what changed from A (baseline) to B, as a terminal table, a PR comment or JSON;
``--fail-on`` turns it into a CI gate (exit 1 when a threshold is passed, 2 on bad input)."""

from __future__ import annotations

import dataclasses
import math
from enum import Enum
from pathlib import Path

import orjson
import typer
from rich.console import Console
from rich.table import Table

from phaseprof.errors import PhaseprofError
from phaseprof.safe_text import json_inert
from phaseprof.safe_text import for_markdown, for_terminal, terminal
from phaseprof.report.diff import BreakdownDiff, BucketDelta, Delta
from phaseprof.report.diff_markdown import (METRIC_LABELS, fmt_change, fmt_rel, fmt_value, diff_markdown,
                                            HEADLINE_SHIFTS)
from phaseprof.report.fail_on import CheckResult, describe
from phaseprof.render.fit import Col, print_fitted


class DiffFormat(str, Enum):
    table = "table"
    markdown = "markdown"
    json = "json"


def diff_json(d: BreakdownDiff, checks: list[CheckResult]) -> bytes:
    """The whole diff (and check results) as JSON; infinities (relative change from 0) become null."""
    doc = {"diff": dataclasses.asdict(d), "warnings": d.warnings,
           "checks": [dataclasses.asdict(c) | {"observed": c.observed if math.isfinite(c.observed) else None}
                      for c in checks]}
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)


def _delta_rows(deltas: list[Delta] | tuple[Delta, ...]) -> list[list[str]]:
    return [[METRIC_LABELS.get(d.metric, d.metric), fmt_value(d.a, d.unit), fmt_value(d.b, d.unit),
             fmt_change(d), fmt_rel(d)] for d in deltas]


_DELTA_COLS = (Col("", "left"), Col("A"), Col("B"), Col("Δ"), Col("Δ %"))
_BUCKET_COLS = tuple([Col("bucket", "left")] + [Col(c) for c in ("A ms/step", "B ms/step", "Δ ms", "A %", "B %",
                                                                 "Δ pp", "A n/step", "B n/step")])


def _bucket_rows(rows: tuple[BucketDelta, ...]) -> list[list[str]]:
    out = []
    for r in rows:
        pp = r.share.change or 0.0
        style = "red" if pp >= 1 else "green" if pp <= -1 else ""
        out.append([r.bucket, fmt_value(r.time_ms.a, "ms"), fmt_value(r.time_ms.b, "ms"), fmt_change(r.time_ms),
                    fmt_value(r.share.a, "%"), fmt_value(r.share.b, "%"), f"[{style}]{pp:+.1f}[/]" if style else
                    f"{pp:+.1f}", fmt_value(r.count.a, "count"), fmt_value(r.count.b, "count")])
    return out


def print_diff(d: BreakdownDiff, console: Console, *, kernels: int = 15) -> None:
    """Terminal rendering: who is A and B, comparability warnings, then per phase the metrics, both bucket
    views and the biggest matched kernel pairs. Strings are shown as they are: pass ``for_terminal(d)``."""
    for key, s in (("A", d.a), ("B", d.b)):
        console.print(f"[bold]{key}[/] {s.label}  {s.gpu} ({s.platform}, {s.mode or 'mode unknown'})")
    for w in d.warnings:
        console.print(f"[yellow]warning: not like for like: {w}[/]")
    unknown = [c.aspect for c in d.comparability if c.status == "unknown"]
    if unknown:
        console.print(f"[dim]not recorded on both sides, not checked: {', '.join(unknown)}[/]")
    for n in d.notes:
        console.print(f"[dim]note: {n}[/]")
    if d.only_in_a or d.only_in_b:
        console.print(f"[yellow]phases only in A: {', '.join(d.only_in_a) or 'none'}; only in B: "
                      f"{', '.join(d.only_in_b) or 'none'} (not compared)[/]")
    if d.timings:
        print_fitted(console, "clean timings (profiler off)", _DELTA_COLS, _delta_rows(d.timings))
    for ph in d.phases:
        print_fitted(console, f"{ph.phase}: per step (A {ph.a_steps} steps, B {ph.b_steps} steps; Δ = B − A)",
                     _DELTA_COLS, _delta_rows(ph.metrics))
        print_fitted(console, f"{ph.phase}: kernel view (share = % of GPU busy)", _BUCKET_COLS,
                     _bucket_rows(ph.kernel_view))
        print_fitted(console, f"{ph.phase}: module view", _BUCKET_COLS, _bucket_rows(ph.module_view))
        if ph.coverage:  # how far the module view rests on evidence (attribution methods, % of GPU busy)
            print_fitted(console, f"{ph.phase}: module view from (% of GPU busy)", _DELTA_COLS,
                         _delta_rows(ph.coverage))
        if ph.layers:
            print_fitted(console, f"{ph.phase}: per decoder layer (ms/step)", _DELTA_COLS, _delta_rows(ph.layers))
        if ph.launches_by_api:
            print_fitted(console, f"{ph.phase}: launch calls per step by API", _DELTA_COLS,
                         _delta_rows(ph.launches_by_api))
        # Each matched pair as a group: a row per side with its full (folded) kernel name.
        cols = (Col("bucket/module · side · kernel", "left", fold=True), Col("ms/step"), Col("by", "left"))
        rows: list[list[str]] = []
        for m in [m for m in ph.kernels if m.how != "unmatched"][:kernels]:
            rows.append([f"[bold]{m.group}[/]", "", m.how])  # names arrive escaped (for_terminal)
            for side, k in (("A", m.a), ("B", m.b)):
                rows.append([f"{side} {k.name if k else '—'}", fmt_value(k.ms_per_step if k else None, "ms"),
                             ""])
        print_fitted(console, f"{ph.phase}: matched kernels (same name first, else within a bucket and module; "
                     f"top {kernels} by time)",
                     cols, rows, sections=tuple(range(2, len(rows) - 1, 3)))
        only = [m for m in ph.kernels if m.how == "unmatched"]
        if only:
            console.print(f"[dim]{ph.phase}: {len(only)} top kernel(s) without a counterpart, biggest: " + "; ".join(
                f"{'A' if m.a else 'B'} {m.bucket}: {(m.a or m.b).name}"  # type: ignore[union-attr]
                for m in only[:HEADLINE_SHIFTS]) + "[/]")


def diff(
    a: Path = typer.Argument(..., help="Baseline: a breakdown JSON, a run directory, or a raw trace."),
    b: Path | None = typer.Argument(None, help="Candidate, same kinds; every change is B − A (omit with "
                                    "--project-to)."),
    fmt: DiffFormat = typer.Option(DiffFormat.table, "--format", "-f", help="table, markdown (a PR comment) "
                                   "or json."),
    fail_on: list[str] = typer.Option([], "--fail-on", help="Exit 1 when this threshold is passed, e.g. "
                                      "'moe.share > +2pp', 'decode.launches_per_step > +10%'. Repeatable; "
                                      "grammar in docs/diff.md."),
    rules: list[Path] = typer.Option([], "--rules", help="Extra classification rules (TOML) for inputs that "
                                     "are analysed here (raw traces). Repeatable."),
    project_to: str | None = typer.Option(None, "--project-to", help="Estimate A on this GPU (e.g. B200) at A's "
                                          "measured efficiency per bucket, from the speed-of-light model."),
    model_config: str | None = typer.Option(None, "--model-config", help="Model config for the speed-of-light "
                                            "numbers and the layer plan of graph traces, when the inputs do "
                                            "not record one."),
) -> None:
    """Compare two breakdowns per phase: bucket deltas in both views, launches, allocations, idle time, matched
    kernels, and whether A and B are comparable at all."""
    from phaseprof.report.diff import diff_breakdowns, load_side
    from phaseprof.report.fail_on import evaluate, parse_thresholds

    from phaseprof.sol import diff_view

    thresholds = parse_thresholds(list(fail_on))  # bad expressions fail before the slow part
    console = Console()
    err = Console(stderr=True)
    if b is None:
        if project_to is None:
            raise PhaseprofError("diff needs two inputs A B (or one with --project-to GPU)")
        proj = diff_view.projection_for(load_side(a, rules=list(rules) or None).breakdown, a, project_to,
                                        model_config)
        if fmt == DiffFormat.json:
            typer.echo(json_inert(orjson.dumps({"estimate": True, "projection": dataclasses.asdict(proj)},
                                               option=orjson.OPT_INDENT_2).decode()))
        elif fmt == DiffFormat.markdown:
            typer.echo(diff_view.projection_markdown(proj), nl=False)
        else:
            diff_view.print_projection(proj, console)
        return
    sides = []
    for p in (a, b):
        with err.status(f"reading {terminal(str(p))} ...", spinner="dots"):
            sides.append(load_side(p, rules=list(rules) or None, model_config=model_config))
    sa, sb = sides
    sol_a, sol_b = (diff_view.with_sol(s.breakdown, p, model_config) for s, p in ((sa, a), (sb, b)))
    d = diff_breakdowns(sa.breakdown, sb.breakdown, order_a=sa.order, order_b=sb.order,
                        labels=(_label(a), _label(b)))
    checks = evaluate(thresholds, d)
    if fmt == DiffFormat.table:
        print_diff(for_terminal(d), console)
        diff_view.print_changes(sol_a, sol_b, console)
    elif fmt == DiffFormat.markdown:
        typer.echo(diff_markdown(for_markdown(d), checks=checks) + diff_view.changes_markdown(sol_a, sol_b), nl=False)
    else:
        typer.echo(json_inert(diff_view.with_changes_json(diff_json(d, checks), sol_a, sol_b).decode()))
    for c in checks:
        err.print(("[red]FAIL " if c.failed else "[green]ok   ") + describe(c) + "[/]", highlight=False,
                  soft_wrap=True)
    failed = [c for c in checks if c.failed]
    if failed:
        # An error with exit code 1 (not typer.Exit): phaseprof.commands.main.main turns it into one line and exit 1.
        raise PhaseprofError(f"{len(failed)} of {len(checks)} --fail-on check(s) failed", exit_code=1)


def _label(p: Path) -> str:
    return p.name if p.name not in ("breakdown.json", "trace.json.gz") else f"{p.parent.name}/{p.name}"


def register(app: typer.Typer) -> None:
    """Add ``phaseprof diff`` to ``app``."""
    app.command("diff")(diff)
