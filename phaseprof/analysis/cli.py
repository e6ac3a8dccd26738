"""``phaseprof analyze``: traces in, breakdowns out."""

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
                                           "phaseprof's (needs the hta extra); 'shapes': the model's GEMM FLOPs "
                                           "beside the recorded Input Dims."),
    model_config: str | None = typer.Option(None, "--model-config", help="Model config for the speed-of-light "
                                            "section: config.json, its directory, or a preset name (default: "
                                            "what run.json / the trace records)."),
    ceilings: str | None = typer.Option(None, "--ceilings", help="Measured ceilings JSON (phaseprof ceilings "
                                        "--out) instead of the GPU's datasheet figures, or 'spec' for the "
                                        "datasheet (default: a ceilings/ folder above the run, else datasheet)."),
) -> None:
    """Break a trace down by step, phase and bucket (kernel and module views)."""
    from phaseprof.analysis.pipeline import analyze_trace
    from phaseprof.report.json_io import dumps, write_breakdown
    from phaseprof.report.markdown import breakdown_markdown
    from phaseprof.report.table import print_breakdown
    from phaseprof.sol.attach import attach_sol

    console = Console()
    traces = _expand(traces, rules, console, json_out)
    if not traces:
        return
    if json_out is not None and len(traces) > 1 and json_out.suffix == ".json":
        raise PhaseprofError("--json must be a directory when several traces are given", path=json_out)
    for tr in traces:
        with console.status(f"analysing {tr} ...", spinner="dots") if fmt == OutputFormat.table else _null():
            bd = analyze_trace(tr, rules=list(rules) or None)
            bd = attach_sol(bd, source=tr, model_config=model_config, ceilings=ceilings)
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
        if cross_check == "shapes":
            from phaseprof.sol.attach import shape_check
            from phaseprof.sol.render import print_shape_check

            print_shape_check(*shape_check(tr, bd, model_config),
                              console if fmt == OutputFormat.table else Console(stderr=True))
        elif cross_check:
            if cross_check != "hta":
                raise PhaseprofError(f"unknown --cross-check {cross_check!r} (supported: hta, shapes)")
            from phaseprof.analysis.hta_check import cross_check_hta, print_cross_check

            # On stderr when stdout carries JSON or markdown, so piped output stays parseable.
            print_cross_check(cross_check_hta(tr, bd), console if fmt == OutputFormat.table else Console(stderr=True))


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
        with console.status(f"analysing {len(files)} rank traces in {p} ...", spinner="dots"):
            summary = analyze_ranks(files, rules=list(rules) or None)
        print_rank_summary(summary, console)
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
