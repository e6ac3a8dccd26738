"""``phaseprof analyze``: traces in, breakdowns out (the run is ``analyze_plain.run``).

Each parameter is declared once, in :data:`PARAMS`: its names and help; its type and default are those of the
keyword of ``run`` it sets. From that table :func:`register` builds typer's command (help, usage errors, any
command line :func:`parse` leaves to it) and :func:`parse` reads a plain one without importing typer. Typer's
path, with the pydantic its option coercion imports, makes ``phaseprof analyze --format json`` of the committed
H200 eager decode trace ~0.075 s slower (0.58 s against 0.50 s wall, 0.54 against 0.47 CPU-s; medians of 9,
2 vCPUs; ``benchmarks/bench_cli.py``)."""

from __future__ import annotations

import typing
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from phaseprof.commands.analyze_plain import run

if TYPE_CHECKING:
    import typer


class Param(NamedTuple):
    """One parameter of ``phaseprof analyze``: its option names (none: the positional argument) and help."""

    names: tuple[str, ...]
    help: str
    metavar: str | None = None
    min: int | None = None  # an int option's least value


#: The parameters of ``phaseprof analyze`` by the keyword of ``analyze_plain.run`` each sets, in the order of its
#: help.
PARAMS: dict[str, Param] = {
    "traces": Param((), "Kineto trace files (.json or .json.gz)."),
    "json_out": Param(("--json",), "Write the breakdown JSON here (one trace) or into this directory (several "
                      "traces)."),
    "fmt": Param(("--format", "-f"), "What to print."),
    "rules": Param(("--rules",), "Extra classification rules (TOML), matched before the defaults. Repeatable."),
    "cross_check": Param(("--cross-check",), "'hta': print HTA's kernel totals beside phaseprof's (needs the hta "
                         "extra); 'shapes': the model's GEMM FLOPs beside the recorded Input Dims."),
    "model_config": Param(("--model-config",), "Model config for the speed-of-light section and the layer plan of "
                          "graph replays: config.json, its directory, or a preset name (default: what run.json / "
                          "the trace records)."),
    "by": Param(("--by",), "'layer': also print time per decoder layer per bucket (needs nn.Module events, or graph "
                "replays and the model config)."),
    "graph_reference": Param(("--graph-reference",), "Trace (or run directory) of the CUDA-graph capture (or an "
                             "eager run) of the same model: gives graph-replayed kernels the modules they were "
                             "captured in."),
    "ceilings": Param(("--ceilings",), "Measured ceilings JSON (phaseprof ceilings --out) instead of the GPU's "
                      "datasheet figures, or 'spec' for the datasheet (default: a ceilings/ folder above the run, "
                      "else datasheet)."),
    "full_names": Param(("--full-names",), "Print kernel names whole (default: short, Nsight-style; JSON always "
                        "keeps them whole)."),
    "jobs": Param(("--jobs", "-j"), "Worker processes for the rank files of a rank directory (default: all "
                  "cores).", min=1),
    "steps": Param(("--steps",), "Analyse only these steps of one trace, a Python slice of the step table's "
                   "numbers (4:8: steps 4-7), loading only the events they need (needs step markers).",
                   metavar="FIRST:LAST"),
    "ray": Param(("--ray",), "Analyse the rank files that TRACES (globs, quoted) match on every node of a Ray "
                 "cluster, each on the node holding it: 'auto' (this machine's cluster), 'local' (start one here) "
                 "or HOST:PORT.", metavar="ADDRESS"),
    "reader": Param(("--reader",), "Trace reader: 'native' (the Rust scanner the wheel ships; an error where it "
                    "cannot read the trace), 'python' (the pure-Python reference) or 'auto' (native where "
                    "installed and possible, else python). Both give the same numbers."),
    "verbose": Param(("--verbose", "-v"), "Say on stderr which reader read each trace and why."),
}

HELP = """Break a trace down by step, phase and bucket (kernel and module views).

A directory of rank traces (or --ray) gives a multi-rank report: per-rank totals, per-step imbalance and who
waited for whom in every collective; --format json prints it, --json DIR writes it (multirank.json) and
each rank's breakdown."""


def _value_type(hint: Any) -> tuple[type, bool]:  # noqa: ANN401 - a type hint
    """The type of one value of a parameter typed ``hint`` (``X | None`` is X), and whether it repeats (list[X])."""
    args = typing.get_args(hint)
    if type(None) in args:
        hint = next(a for a in args if a is not type(None))
    if typing.get_origin(hint) is list:
        return typing.get_args(hint)[0], True
    return hint, False


def parse(argv: list[str]) -> dict[str, Any] | None:
    """The keywords of ``run`` for ``argv`` (the words after ``analyze``), or None where typer must parse it:
    anything but trace words and the options of :data:`PARAMS`, each given once as ``--name value``,
    ``--name=value`` or ``-x value`` with a value that needs no checking beyond what is done here (typer then gives
    its own help, usage errors and messages)."""
    hints = typing.get_type_hints(run)
    by_name = {name: key for key, param in PARAMS.items() for name in param.names}
    kw: dict[str, Any] = {key: [] for key in PARAMS if _value_type(hints[key])[1]}
    seen: set[str] = set()
    words = iter(argv)
    for word in words:
        if word == "-" or not word.startswith("-"):
            kw["traces"].append(Path(word))
            continue
        name, eq, value = word.partition("=") if word.startswith("--") else (word, "", "")
        key = by_name.get(name)
        if key is None:
            return None
        kind, repeats = _value_type(hints[key])
        if kind is bool:
            if eq or key in seen:
                return None
            kw[key] = True
            seen.add(key)
            continue
        if not eq:
            value = next(words, None)
            if value is None:
                return None
        if not value or value.startswith("-") or (key in seen and not repeats):
            return None  # "-" (standard input) as a value, an empty one, a repeat: typer says what it makes of it
        seen.add(key)
        if issubclass(kind, Enum):
            if value not in kind._value2member_map_:
                return None
            got: Any = kind(value)
        elif kind is int:
            least = PARAMS[key].min
            if not (value.isascii() and value.isdigit()) or (least is not None and int(value) < least):
                return None
            got = int(value)
        else:  # Path or str
            got = kind(value)
        if repeats:
            kw[key].append(got)
        else:
            kw[key] = got
    return kw if kw["traces"] else None


def register(app: typer.Typer) -> None:
    """Add ``analyze`` to ``app``: a command whose signature :data:`PARAMS` and ``run``'s types make."""
    import inspect

    import typer

    hints = typing.get_type_hints(run)
    defaults = inspect.signature(run).parameters
    params = []
    for key, param in PARAMS.items():
        info = (typer.Option(defaults[key].default, *param.names, help=param.help, metavar=param.metavar,
                             min=param.min) if param.names else typer.Argument(..., help=param.help))
        params.append(inspect.Parameter(key, inspect.Parameter.KEYWORD_ONLY, default=info, annotation=hints[key]))

    def analyze(**options: Any) -> None:  # noqa: ANN401 - typer reads the signature set below
        run(**options)

    analyze.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    analyze.__annotations__ = {p.name: p.annotation for p in params}
    analyze.__doc__ = HELP
    app.command("analyze")(analyze)
