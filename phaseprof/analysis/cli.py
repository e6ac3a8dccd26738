"""``phaseprof analyze``: traces in, breakdowns out."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer
from rich.console import Console

from phaseprof.errors import PhaseprofError
from phaseprof.safe_text import for_markdown, for_terminal, terminal


class OutputFormat(str, Enum):
    table = "table"
    json = "json"
    markdown = "markdown"


def analyze(
    traces: list[Path] = typer.Argument(..., help="Kineto trace files (.json or .json.gz)."),
    json_out: Path | None = typer.Option(None, "--json", help="Write the breakdown JSON here (one trace) or into "
                                         "this directory (several traces)."),
    fmt: OutputFormat = typer.Option(OutputFormat.table, "--format", "-f", help="What to print."),
    rules: list[Path] = typer.Option([], "--rules", help="Extra classification rules (TOML), matched before the "
                                     "defaults. Repeatable."),
    cross_check: str | None = typer.Option(None, "--cross-check", help="'hta': print HTA's kernel totals beside "
                                           "phaseprof's (needs the hta extra)."),
) -> None:
    """Break a trace down by step, phase and bucket (kernel and module views)."""
    from phaseprof.analysis.pipeline import analyze_trace
    from phaseprof.report.json_io import dumps, write_breakdown
    from phaseprof.report.markdown import breakdown_markdown
    from phaseprof.report.table import print_breakdown

    console = Console()
    traces = _expand(traces, rules, console, json_out)
    if not traces:
        return
    if json_out is not None and len(traces) > 1 and json_out.suffix == ".json":
        raise PhaseprofError("--json must be a directory when several traces are given", path=json_out)
    for tr in traces:
        with console.status(f"analysing {terminal(str(tr))} ...", spinner="dots") if fmt == OutputFormat.table else _null():
            bd = analyze_trace(tr, rules=list(rules) or None)
        if json_out is not None:
            dest = json_out if len(traces) == 1 and json_out.suffix == ".json" else \
                json_out / (tr.name.split(".json")[0] + ".breakdown.json")
            write_breakdown(bd, dest)
            console.print(f"[dim]wrote {terminal(str(dest))}[/]") if fmt == OutputFormat.table else None
        if fmt == OutputFormat.table:
            print_breakdown(for_terminal(bd), console)
        elif fmt == OutputFormat.json:
            typer.echo(dumps(bd).decode())
        else:
            typer.echo(breakdown_markdown(for_markdown(bd)))
        if cross_check:
            if cross_check != "hta":
                raise PhaseprofError(f"unknown --cross-check {cross_check!r} (supported: hta)")
            from phaseprof.analysis.hta_check import cross_check_hta, print_cross_check

            # On stderr when stdout carries JSON or markdown, so piped output stays parseable.
            print_cross_check(for_terminal(cross_check_hta(tr, bd)), console if fmt == OutputFormat.table else Console(stderr=True))


def _expand(paths: list[Path], rules: list[Path], console: Console, json_out: Path | None) -> list[Path]:
    """Directories: a run directory's trace.json.gz, or several rank traces analysed together."""
    from phaseprof.analysis.ranks import analyze_ranks, find_trace_files
    from phaseprof.report.json_io import write_breakdown
    from phaseprof.report.table import print_rank_summary

    out: list[Path] = []
    for p in paths:
        if not p.is_dir():
            out.append(p)
            continue
        files = find_trace_files(p)
        if len(files) == 1:
            out.append(files[0])
            continue
        with console.status(f"analysing {len(files)} rank traces in {terminal(str(p))} ...", spinner="dots"):
            summary = analyze_ranks(files, rules=list(rules) or None)
        print_rank_summary(for_terminal(summary), console)
        if json_out is not None:
            for r, bd in summary.ranks.items():
                write_breakdown(bd, json_out / f"rank{r}.breakdown.json")
    return out


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *a: object) -> None:
        return None


def register(app: typer.Typer) -> None:
    app.command("analyze")(analyze)
