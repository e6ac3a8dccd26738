"""``phaseprof analyze``: traces in, breakdowns out (rendered by this package; computed by ``analysis.pipeline``)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer
from rich.console import Console

from phaseprof.errors import PhaseprofError


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
    from phaseprof.analysis.pipeline import AnalysisConfig, analyze as run_pipeline
    from phaseprof.report.json_io import dumps, write_breakdown
    from phaseprof.report.markdown import breakdown_markdown
    from phaseprof.report.table import print_breakdown

    console = Console()
    traces = _expand(traces, rules, console, json_out)
    if not traces:
        return
    if json_out is not None and len(traces) > 1 and json_out.suffix == ".json":
        raise PhaseprofError("--json must be a directory when several traces are given", path=json_out)
    config = AnalysisConfig.with_rules(rules)
    ruleset = config.ruleset()
    for tr in traces:
        with console.status(f"analysing {tr} ...", spinner="dots") if fmt == OutputFormat.table else _null():
            analysed = run_pipeline(tr, ruleset=ruleset)
        bd = analysed.breakdown
        if json_out is not None:
            dest = json_out if len(traces) == 1 and json_out.suffix == ".json" else \
                json_out / (tr.name.split(".json")[0] + ".breakdown.json")
            write_breakdown(bd, dest)
            console.print(f"[dim]wrote {dest}[/]") if fmt == OutputFormat.table else None
        if fmt == OutputFormat.table:
            print_breakdown(bd, console)
        elif fmt == OutputFormat.json:
            typer.echo(dumps(bd).decode())
        else:
            typer.echo(breakdown_markdown(bd))
        if cross_check:
            if cross_check != "hta":
                raise PhaseprofError(f"unknown --cross-check {cross_check!r} (supported: hta)")
            from phaseprof.analysis.hta_check import cross_check_hta, print_cross_check

            # On stderr when stdout carries JSON or markdown, so piped output stays parseable.
            print_cross_check(cross_check_hta(analysed), console if fmt == OutputFormat.table else Console(stderr=True))
        del analysed  # this trace's tables go before the next trace is loaded


def _expand(paths: list[Path], rules: list[Path], console: Console, json_out: Path | None) -> list[Path]:
    """The traces to analyse one by one (``inputs.resolve``): a trace, a run directory's trace; a directory of
    rank traces is analysed here, together (per-rank breakdowns and load imbalance)."""
    from phaseprof.analysis.ranks import analyze_ranks
    from phaseprof.inputs import InputKind, resolve
    from phaseprof.report.json_io import write_breakdown
    from phaseprof.report.table import print_rank_summary

    out: list[Path] = []
    for p in paths:
        got = resolve(p)
        if got.kind == InputKind.RANKS:
            with console.status(f"analysing {len(got.rank_traces)} rank traces in {p} ...", spinner="dots"):
                summary = analyze_ranks(list(got.rank_traces), rules=list(rules) or None)
            print_rank_summary(summary, console)
            if json_out is not None:
                for r, bd in summary.ranks.items():
                    write_breakdown(bd, json_out / f"rank{r}.breakdown.json")
        elif got.kind == InputKind.BREAKDOWN:
            raise PhaseprofError("a breakdown JSON, not a trace: analyze reads traces (phaseprof diff and the "
                                 "dashboard read breakdowns)", path=p)
        elif got.kind == InputKind.SWEEP:
            raise PhaseprofError("a sweep, not a trace: show it with phaseprof sweep --show", path=p)
        elif got.trace is None:
            raise PhaseprofError("no trace files (*.json, *.json.gz) in this directory", path=p)
        else:
            out.append(got.trace)
    return out


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *a: object) -> None:
        return None


def register(app: typer.Typer) -> None:
    app.command("analyze")(analyze)
