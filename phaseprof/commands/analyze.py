"""``phaseprof analyze``: traces in, breakdowns out (rendered by this package; computed by ``analysis.pipeline``).
The command's options and help; its run is ``analyze_plain.run``."""

from __future__ import annotations

from pathlib import Path

import typer

from phaseprof.commands.analyze_plain import OutputFormat, run
from phaseprof.trace.readers import Reader

# typer's command: its options and help. The run itself is ``analyze_plain.run``, which ``phaseprof analyze``
# calls without typer for the command lines ``analyze_plain.parse`` is sure of.


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
                                            "section and the layer plan of graph replays: config.json, its "
                                            "directory, or a preset name (default: what run.json / the trace "
                                            "records)."),
    by: str | None = typer.Option(None, "--by", help="'layer': also print time per decoder layer per bucket "
                                  "(needs nn.Module events, or graph replays and the model config)."),
    graph_reference: Path | None = typer.Option(None, "--graph-reference", help="Trace (or run directory) of the CUDA-graph capture "
                                                "(or an eager run) of the same model: gives graph-replayed "
                                                "kernels the modules they were captured in."),
    ceilings: str | None = typer.Option(None, "--ceilings", help="Measured ceilings JSON (phaseprof ceilings "
                                        "--out) instead of the GPU's datasheet figures, or 'spec' for the "
                                        "datasheet (default: a ceilings/ folder above the run, else datasheet)."),
    full_names: bool = typer.Option(False, "--full-names", help="Print kernel names whole (default: short, "
                                    "Nsight-style; JSON always keeps them whole)."),
    jobs: int | None = typer.Option(None, "--jobs", "-j", min=1, help="Worker processes for the rank files of a "
                                    "rank directory (default: all cores)."),
    steps: str | None = typer.Option(None, "--steps", metavar="FIRST:LAST", help="Analyse only these steps of "
                                     "one trace, a Python slice of the step table's numbers (4:8: steps 4-7), "
                                     "loading only the events they need (needs step markers)."),
    ray: str | None = typer.Option(None, "--ray", metavar="ADDRESS", help="Analyse the rank files that TRACES "
                                   "(globs, quoted) match on every node of a Ray cluster, each on the node holding "
                                   "it: 'auto' (this machine's cluster), 'local' (start one here) or HOST:PORT."),
    reader: Reader = typer.Option(Reader.AUTO, "--reader", help="Trace reader: 'native' (the Rust scanner the "
                                  "wheel ships; an error where it cannot read the trace), 'python' (the "
                                  "pure-Python reference) or 'auto' (native where installed and possible, else "
                                  "python). Both give the same numbers."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Say on stderr which reader read each trace and "
                                 "why."),
) -> None:
    """Break a trace down by step, phase and bucket (kernel and module views).

    A directory of rank traces (or --ray) gives a multi-rank report: per-rank totals, per-step imbalance and who
    waited for whom in every collective; --format json prints it, --json DIR writes it (multirank.json) and
    each rank's breakdown."""
    run(traces, json_out=json_out, fmt=fmt, rules=rules, cross_check=cross_check, model_config=model_config, by=by,
        graph_reference=graph_reference, ceilings=ceilings, full_names=full_names, jobs=jobs, steps=steps, ray=ray,
        reader=reader, verbose=verbose)


def register(app: typer.Typer) -> None:
    app.command("analyze")(analyze)
