"""``phaseprof pareto SWEEP_DIR...``: the frontier of tokens/s per GPU vs tokens/s per user across decode
sweeps, with each point's breakdown, the capacity wall and the speed-of-light floor."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

import msgspec
import typer
from rich.console import Console

from phaseprof.io import atomic_write_bytes
from phaseprof.safe_text import json_inert


class OutputFormat(StrEnum):
    TABLE = "table"
    JSON = "json"
    MARKDOWN = "markdown"


def pareto(
    sweeps: list[Path] = typer.Argument(..., help="Decode sweep directories (phaseprof sweep --phase decode); "
                                        "each one is a configuration."),
    output_format: OutputFormat = typer.Option(OutputFormat.TABLE, "--format", help="table, json or markdown."),
    ceilings: str | None = typer.Option(None, "--ceilings", help="Measured ceilings JSON (phaseprof ceilings) "
                                        "for the floors, or 'spec' for the datasheet; default: the GPU's one "
                                        "baseline (the measured ceilings phaseprof ships for it, else its "
                                        "datasheet)."),
    gpu: str | None = typer.Option(None, "--gpu", help="The GPU the sweeps ran on (e.g. 'NVIDIA H200'), for a "
                                   "served sweep that records none; default: the sweep's own record, else the "
                                   "device its --profiled runs' traces name."),
    out: Path | None = typer.Option(None, "--out", help="Write the output to this file instead of stdout."),
    disagg: Path | None = typer.Option(None, "--disagg", help="A prefill sweep directory (with the decode "
                                       "sweeps' prompt length): also model x prefill + y decode instances with "
                                       "each request's KV + GDN-state handoff (a model, labelled as one)."),
    link: str = typer.Option("nvlink4", "--link", help="--disagg: the prefill -> decode link (gpus.toml "
                             "[[link]]: nvlink4, nvlink5, pcie5, ib-ndr, ib-xdr)."),
    max_instances: int = typer.Option(8, "--max-instances", help="--disagg: up to this many instances per side."),
    profiled: list[Path] = typer.Option([], "--profiled", help="A profiled decode run directory (capture "
                                        "--concurrency C, in-process or --server) to show as the breakdown of "
                                        "the sweep point it matches (model, mode, weights, server, prompt "
                                        "length, concurrency). Repeatable."),
) -> None:
    """Pareto frontier of decode sweeps: tokens/s per GPU vs tokens/s per user, which configuration wins
    where, each point's profiled breakdown, capacity wall and speed-of-light floor."""
    from phaseprof.pareto.build import build_report, match_profiled, read_sweeps  # noqa: PLC0415
    from phaseprof.pareto.disagg import add_disagg, check_max_instances  # noqa: PLC0415
    from phaseprof.pareto.render import print_report, report_markdown  # noqa: PLC0415

    if disagg is not None:
        check_max_instances(max_instances)
    read, labels = read_sweeps(sweeps)
    report = build_report(read, labels, sweeps, ceilings=ceilings, profiled=match_profiled(read, profiled), gpu=gpu)
    if disagg is not None:
        report = add_disagg(report, read, labels, prefill=disagg, link=link, max_instances=max_instances)
    if output_format is OutputFormat.TABLE:
        console = Console(record=out is not None, width=120 if out is not None else None)
        print_report(report, console)
        if out is not None:
            atomic_write_bytes(out, console.export_text().encode())
        return
    text = (json_inert(msgspec.json.format(msgspec.json.encode(report), indent=2).decode()) + "\n"
            if output_format is OutputFormat.JSON else report_markdown(report))
    if out is not None:
        atomic_write_bytes(out, text.encode())
    else:
        typer.echo(text, nl=False)


def register(app: typer.Typer) -> None:
    app.command("pareto")(pareto)
