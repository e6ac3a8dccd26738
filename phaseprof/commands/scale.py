"""How ``phaseprof analyze`` renders a multi-rank run (rank directory, or --ray glob): progress, then the table,
JSON or markdown of one :class:`~phaseprof.scale.report.MultiRankReport`."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from phaseprof.scale.ranks import RankSummary, summarize_ranks
from phaseprof.safe_text import for_terminal, terminal
from phaseprof.scale.local import analyze_rank_files, clamp_jobs, default_jobs
from phaseprof.scale.report import write_rank_outputs
from phaseprof.scale.rank_task import RankResult
from phaseprof.trace.readers import Reader


def _progress(console: Console) -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=Console(stderr=True), transient=True, disable=not console.is_terminal)


def print_multirank(summary: RankSummary, console: Console) -> None:
    """The terminal multi-rank report: per-rank totals and imbalance, then who waited for whom."""
    from phaseprof.report.table import print_rank_summary
    from phaseprof.scale.render import print_collectives
    from phaseprof.scale.report import build_report

    print_rank_summary(for_terminal(summary), console)
    print_collectives(build_report(summary), console)


def _emit(summary: RankSummary, *, fmt: str, json_out: Path | None, console: Console,
          documents: list[bytes] | None = None) -> None:
    """Write (--json DIR) and render the report; with ``documents``, its JSON goes there instead of stdout (the
    caller prints one document for all its inputs)."""
    from phaseprof.scale.render import collectives_markdown
    from phaseprof.scale.report import build_report, dumps

    if json_out is not None:
        write_rank_outputs(summary, json_out)
    if fmt == "json" and documents is not None:
        documents.append(dumps(build_report(summary)))
    elif fmt == "json":
        from phaseprof.safe_text import json_inert  # noqa: PLC0415

        typer.echo(json_inert(dumps(build_report(summary)).decode()))
    elif fmt == "markdown":
        typer.echo(collectives_markdown(build_report(summary)))
    else:
        print_multirank(summary, console)
        if json_out is not None:
            console.print(f"[dim]wrote {terminal(str(json_out / 'multirank.json'))} and {len(summary.ranks)} rank breakdowns[/]")


def _say_readers(results: list[RankResult]) -> None:
    """``--verbose``: which reader read each rank file (its breakdown's ``tool.reader``), on stderr."""
    err = Console(stderr=True)
    for r in results:
        what = {"native": "the native scanner", "python": "the pure-Python reader"}.get(r.breakdown.tool.reader or "",
                                                                                          "?")
        err.print(f"{terminal(r.path)}: read by {what}", markup=False, highlight=False, soft_wrap=True)


def analyze_rank_dir(files: list[Path], *, rules: list[Path], jobs: int | None, fmt: str, json_out: Path | None,
                     console: Console, documents: list[bytes] | None = None, reader: Reader = Reader.AUTO,
                     verbose: bool = False) -> RankSummary:
    used = clamp_jobs(jobs, len(files))
    if jobs is not None and used < jobs:  # on stderr: stdout may carry JSON or markdown
        Console(stderr=True).print(f"[dim]--jobs {jobs} clamped to {used} ({default_jobs()} usable core(s), "
                                   f"{len(files)} rank file(s))[/]", highlight=False)
    jobs = used
    with _progress(console) as prog:
        task = prog.add_task(f"analysing {len(files)} rank traces ({jobs} processes)",
                             total=len(files))
        results = analyze_rank_files(files, jobs=jobs, rule_files=rules or None,
                                     on_done=lambda _p: prog.advance(task), reader=reader)
    if verbose:
        _say_readers(results)
    summary = summarize_ranks(results)
    _emit(summary, fmt=fmt, json_out=json_out, console=console, documents=documents)
    return summary


def analyze_on_ray(patterns: list[str], *, address: str | None, rules: list[Path], fmt: str,
                   json_out: Path | None, console: Console, verbose: bool = False) -> RankSummary:
    from phaseprof.scale.ray_run import analyze_on_cluster

    results = []
    with _progress(console) as prog:
        for pattern in patterns:
            task = prog.add_task(f"Ray: {pattern}", total=None)
            _files, res = analyze_on_cluster(pattern, address=address, rule_files=rules or None,
                                             on_done=lambda _f: prog.advance(task))
            results.extend(res)
    if verbose:
        _say_readers(results)
    summary = summarize_ranks(results)
    _emit(summary, fmt=fmt, json_out=json_out, console=console)
    return summary
