"""The run of ``phaseprof analyze`` (:func:`run`), which imports no typer: a plain command line
(``commands.analyze.parse``) calls it directly, any other goes through typer's command (``commands.analyze``),
which calls the same :func:`run`. Its signature gives each option its type and default."""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable
from contextlib import nullcontext
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from phaseprof.errors import PhaseprofError
from phaseprof.io import protect_inputs, refuse_input
from phaseprof.lean_process import own_process
from phaseprof.trace.readers import Reader

if TYPE_CHECKING:
    from rich.console import Console

# The analysis, the reports and rich are imported inside ``run``: after the trace's first bytes are read and,
# for the first trace, on a thread while the native scanner reads it (``trace.read.load_tables(meanwhile=...)``).


class OutputFormat(str, Enum):
    table = "table"
    json = "json"
    markdown = "markdown"


def _echo(text: str) -> None:
    """A line on stdout, flushed (as ``typer.echo`` of a string)."""
    out = sys.stdout
    out.write(text + "\n")
    out.flush()


def run(traces: list[Path], json_out: Path | None = None, fmt: OutputFormat = OutputFormat.table,
        rules: list[Path] | None = None, cross_check: str | None = None, model_config: str | None = None,
        by: str | None = None, graph_reference: Path | None = None, ceilings: str | None = None,
        full_names: bool = False, jobs: int | None = None, steps: str | None = None, ray: str | None = None,
        reader: Reader = Reader.AUTO, verbose: bool = False) -> None:
    """``phaseprof analyze`` with its options parsed (``commands.analyze.PARAMS`` documents them). The reader that
    read each trace, and why, goes to stderr with ``verbose``, and always where a scanner library is installed
    but refused (another ABI: a stale build), which would otherwise only be slower."""
    rules = list(rules or [])
    if by not in (None, "layer"):
        raise PhaseprofError(f"unknown --by {by!r} (supported: layer)")

    step_range = _step_range(steps, traces, ray)
    _console = _Consoles()
    protect_inputs(*traces, *rules, graph_reference, model_config, ceilings)  # never overwritten by --json
    if ceilings is not None and ceilings != "spec":  # a bad file is refused whether or not a floor needs it
        from phaseprof.sol.ceilings import load_measured  # noqa: PLC0415

        load_measured(ceilings)
    if ray is not None:
        from phaseprof.commands.scale import analyze_on_ray

        if reader != Reader.AUTO:
            raise PhaseprofError(f"--reader {reader.value} with --ray: the nodes' tasks read with --reader auto "
                                 "(the native scanner where their phaseprof has it); --verbose says which")
        analyze_on_ray([str(t) for t in traces], address=None if ray == "local" else ray, rules=list(rules),
                       fmt=fmt.value, json_out=json_out, console=_console(), verbose=verbose)
        return
    # -f json prints one document: the breakdown (or multi-rank report) of one input; for several inputs, a JSON
    # array of them in the order given, printed once all are done (a failure leaves stdout empty).
    documents: list[bytes] = []
    several = len(traces) > 1
    traces = _expand(traces, rules, _console, json_out, fmt=fmt.value, jobs=jobs,
                     documents=documents if fmt == OutputFormat.json else None, reader=reader, verbose=verbose)
    if not traces:
        _print_json(documents, several=several)
        return
    if json_out is not None and len(traces) > 1 and json_out.suffix == ".json":
        raise PhaseprofError("--json must be a directory when several traces are given", path=json_out)
    for dest in [json_out, *(_dest(json_out, tr, len(traces)) for tr in traces)] if json_out is not None else []:
        refuse_input(dest)  # before the slow part: nothing analysed or written
    rulesets: list[Any] = []  # the config's rules, loaded on a thread while the first trace is read

    def set_up() -> None:
        _import_analysis(fmt)
        rulesets.append(_config(rules, graph_reference, model_config, ceilings).ruleset())

    if fmt == OutputFormat.table:
        _console()  # rich, before the spinner
    first = _first_tables(traces[0], step_range, set_up, reader)
    from phaseprof.analysis.pipeline import analyze as run_pipeline
    from phaseprof.report.json_io import dumps, write_breakdown
    from phaseprof.safe_text import for_markdown, for_terminal, terminal
    from phaseprof.sol.attach import reported

    config = _config(rules, graph_reference, model_config, ceilings, reader)
    ruleset = rulesets[0] if rulesets else config.ruleset()
    for tr in traces:
        with _console().status(f"analysing {terminal(str(tr))} ...", spinner="dots") if fmt == OutputFormat.table else nullcontext():
            source, first = (first if first is not None else tr), None
            analysed = run_pipeline(source, config=config, ruleset=ruleset, steps=step_range)
        _say_reader(tr, analysed.tables.read_by, reader=reader, verbose=verbose, console=_console)
        bd = reported(analysed)  # with its speed-of-light section
        if json_out is not None:
            dest = _dest(json_out, tr, len(traces))
            write_breakdown(bd, dest)
            _console().print(f"[dim]wrote {terminal(str(dest))}[/]") if fmt == OutputFormat.table else None
        if fmt == OutputFormat.table:
            from phaseprof.report.attribution import print_layers
            from phaseprof.report.table import print_breakdown

            print_breakdown(for_terminal(bd), _console(), full_names=full_names)
            if by == "layer":
                print_layers(for_terminal(bd), _console())
                if bd.sol is not None:
                    from phaseprof.sol.render import print_moe_layers  # noqa: PLC0415

                    print_moe_layers(bd.sol, _console())
        elif fmt == OutputFormat.json:
            documents.append(dumps(bd))
        else:
            from phaseprof.report.markdown import breakdown_markdown

            _echo(breakdown_markdown(for_markdown(bd), by_layer=by == "layer"))
        if cross_check == "shapes":
            from phaseprof.sol.attach import shape_check
            from phaseprof.sol.render import print_shape_check

            print_shape_check(*shape_check(tr, bd, model_config),
                              _console() if fmt == OutputFormat.table else _console(stderr=True))
        elif cross_check:
            if cross_check != "hta":
                raise PhaseprofError(f"unknown --cross-check {cross_check!r} (supported: hta, shapes)")
            from phaseprof.analysis.hta_check import cross_check_hta, print_cross_check

            # On stderr when stdout carries JSON or markdown, so piped output stays parseable.
            print_cross_check(for_terminal(cross_check_hta(analysed)),
                              _console() if fmt == OutputFormat.table else _console(stderr=True))
        del analysed  # this trace's tables go before the next trace is loaded
    _print_json(documents, several=several)


#: What a run of ``analyze`` imports besides its loader: imported on a thread while the first trace is read.
ANALYSIS_MODULES = ("phaseprof.analysis.pipeline", "phaseprof.report.json_io", "phaseprof.safe_text",
                    "phaseprof.sol.attach")
#: And the renderer of its format: a run that prints JSON never imports rich (~0.05-0.1 s of CPU).
RENDERERS = {OutputFormat.table: ("phaseprof.report.table", "phaseprof.report.attribution"),
             OutputFormat.markdown: ("phaseprof.report.markdown",), OutputFormat.json: ()}


def _import_analysis(fmt: OutputFormat) -> None:
    import importlib

    for name in ANALYSIS_MODULES + RENDERERS[fmt]:
        importlib.import_module(name)


def _config(rules: list[Path], graph_reference: Path | None, model_config: str | None,
            ceilings: str | None, reader: Reader = Reader.AUTO) -> Any:  # noqa: ANN401 - AnalysisConfig
    from phaseprof.analysis.pipeline import AnalysisConfig

    return AnalysisConfig.with_rules(rules, graph_reference=graph_reference, model_config=model_config,
                                     ceilings=ceilings, reader=reader)


def _say_reader(trace: Path, read_by: Any, *, reader: Reader, verbose: bool,  # noqa: ANN401 - ReadBy
                console: Callable[..., Console]) -> None:
    """``trace``'s reader on stderr (``--verbose``), and, reading with ``--reader auto``, a refused scanner
    library even without it (a stale build: only slower otherwise)."""
    from phaseprof.safe_text import terminal
    from phaseprof.trace import native

    if verbose:
        console(stderr=True).print(f"{terminal(str(trace))}: {terminal(read_by.line())}", markup=False,
                                   highlight=False, soft_wrap=True)
    elif reader == Reader.AUTO and read_by.reader == "python" and native.status().refused:
        console(stderr=True).print(f"warning: {terminal(native.status().problem or '')}; traces are read by the "
                                   "slower pure-Python reader", markup=False, highlight=False, soft_wrap=True)


def _first_tables(trace: Path, step_range: object, set_up: Any,
                  reader: Reader = Reader.AUTO) -> Any:  # noqa: ANN401 - EventTables | None
    """The first trace's tables, read while ``set_up`` runs on a thread (``trace.read.load_tables``); None where
    the pipeline reads the trace itself (``--steps``: only the events of those steps)."""
    if step_range is not None:
        return None
    from phaseprof.trace.readahead import ReadAhead

    # The read starts now, on a thread; the loader's imports (numpy, msgspec, the scanner: 0.3 s) overlap it.
    ahead = ReadAhead(trace) if str(trace) != "-" else None
    try:
        from phaseprof.trace.read import load_tables
    except BaseException:
        if ahead is not None:
            ahead.close()
        raise
    # In the phaseprof program: no cyclic garbage collection while the read and the imports beside it make their
    # ~10^5 objects (none in a cycle); then those are frozen, so the first collection after the read does not
    # walk them all (that collection alone was 0.05-0.07 s of a 1.4 s run on 115 MB, between the read and the
    # analysis). Not where ``run`` is called in a longer-lived process (tests): frozen objects are never freed.
    pause = own_process() and gc.isenabled()
    if pause:
        gc.disable()
    try:
        return load_tables(trace, meanwhile=set_up, ahead=ahead, reader=reader)
    finally:
        if pause:
            gc.freeze()
            gc.enable()


class _Consoles:
    """A run's rich consoles, made on first use: a run that prints JSON never imports rich."""

    def __init__(self) -> None:
        self._made: dict[bool, Console] = {}

    def __call__(self, *, stderr: bool = False) -> Console:
        if stderr not in self._made:
            from rich.console import Console

            self._made[stderr] = Console(stderr=stderr)
        return self._made[stderr]


def _print_json(documents: list[bytes], *, several: bool) -> None:
    """stdout's one JSON document: the only one as it is, or (several inputs) an array of them (docs/README)."""
    if documents:
        from phaseprof.safe_text import json_inert  # noqa: PLC0415

        _echo(json_inert((documents[0] if len(documents) == 1 and not several else
                          b"[\n" + b",\n".join(documents) + b"\n]").decode()))


def _dest(json_out: Path, trace: Path, n_traces: int) -> Path:
    """Where ``--json`` puts this trace's breakdown: the file itself (one trace) or a file in that directory."""
    return json_out if n_traces == 1 and json_out.suffix == ".json" else \
        json_out / (trace.name.split(".json")[0] + ".breakdown.json")


def _expand(paths: list[Path], rules: list[Path], console: Callable[[], Console], json_out: Path | None, *,
            fmt: str = "table", jobs: int | None = None, documents: list[bytes] | None = None,
            reader: Reader = Reader.AUTO, verbose: bool = False) -> list[Path]:
    """The traces to analyse one by one (``inputs.resolve``): a trace, a run directory's trace; a directory of
    rank traces is analysed here, together (``--jobs`` processes; per-rank breakdowns and the multi-rank report)."""
    from phaseprof.inputs import InputKind, resolve, scan_traces

    out: list[Path] = []
    for p in paths:
        if str(p) == "-":  # standard input, read once by the loader
            out.append(p)
            continue
        record = _run_record(p)  # read once: it tells a PD run, and a run that kept only its record
        if record is not None and record.kind == "pd":
            out.extend(_pd_run(p, record, fmt=fmt, console=console, documents=documents))
            continue
        got = resolve(p)
        protect_inputs(got.trace, *got.rank_traces)
        if got.kind == InputKind.RANKS:
            from phaseprof.scale.workers import start_early

            start_early(jobs, len(got.rank_traces))  # the workers' imports run beside this process's
            from phaseprof.commands.scale import analyze_rank_dir

            analyze_rank_dir(list(got.rank_traces), rules=list(rules), jobs=jobs, fmt=fmt, json_out=json_out,
                             console=console(), documents=documents, reader=reader, verbose=verbose)
        elif got.kind == InputKind.BREAKDOWN:
            raise PhaseprofError("a breakdown JSON, not a trace: analyze reads traces (phaseprof diff and the "
                                 "dashboard read breakdowns)", path=p)
        elif got.kind == InputKind.SWEEP:
            raise PhaseprofError("a sweep, not a trace: show it with phaseprof sweep --show", path=p)
        elif got.trace is None and got.breakdown is not None:  # a run that kept its breakdown, not its trace
            _print_stored(got.breakdown, fmt=fmt, console=console, documents=documents)
        elif got.trace is None and record is not None and got.kind == InputKind.RUN:
            from phaseprof.records import record_only  # noqa: PLC0415

            raise PhaseprofError(record_only(p, record).line, path=p)
        elif got.trace is None:
            raise scan_traces(p).none_error(p)
        else:
            out.append(got.trace)
    return out


def _print_stored(path: Path, *, fmt: str, console: Callable[[], Console], documents: list[bytes] | None,
                  title: str | None = None) -> None:
    """A breakdown.json as analyze prints a trace's (its trace was not kept: committed runs keep only this)."""
    from phaseprof.report.json_io import load_breakdown

    bd = load_breakdown(path)
    if fmt == "json":
        if documents is not None:
            documents.append(path.read_bytes())
        return
    # the trace was not kept: name it beside its breakdown, not at the recording host's path (/root/keep/...)
    from dataclasses import replace  # noqa: PLC0415

    bd = replace(bd, trace=replace(bd.trace, path=f"{path.parent / Path(bd.trace.path).name} (not kept)"))
    if fmt == "table":
        from phaseprof.report.table import print_breakdown
        from phaseprof.safe_text import for_terminal, terminal

        console().print(f"[dim]{terminal(title or str(path))}: the stored breakdown (no trace kept)[/]")
        print_breakdown(for_terminal(bd), console())
    else:
        from phaseprof.report.markdown import breakdown_markdown
        from phaseprof.safe_text import for_markdown

        _echo(breakdown_markdown(for_markdown(bd)))


def _run_record(p: Path) -> Any:  # noqa: ANN401 - RunRecord | None
    """A run directory's run.json, typed; None for anything else, and for a run.json that does not read (a
    trace beside it is still analysed; the reader that needs the record says what is wrong with it)."""
    from phaseprof.records import RunDir  # noqa: PLC0415

    if not (p.is_dir() and RunDir(p).has_record):
        return None
    try:
        return RunDir(p).record
    except PhaseprofError:
        return None


def _pd_run(p: Path, record: Any, *, fmt: str, console: Callable[[], Console],
            documents: list[bytes] | None) -> list[Path]:
    """A disaggregated (PD) run (``record``: its run.json, read once): the handoff summary and the profiled
    request's timeline (``disagg.run``), then each engine's trace to analyse (or its stored breakdown when the
    trace was not kept)."""
    from phaseprof.disagg.run import read_pd_run, run_file

    run = read_pd_run(p, record)
    if fmt == "json":
        if documents is not None:  # the record as read, checked and its centre re-derived: what every view prints
            import orjson  # noqa: PLC0415

            documents.append(orjson.dumps(run.handoff.to_dict(), option=orjson.OPT_INDENT_2))
        return []
    from phaseprof.disagg.render import requests_table, summary_lines, timeline_lines

    lines = [*summary_lines(run.handoff), *timeline_lines(run.timeline, run.timeline_note)]
    if fmt == "table":
        for line in lines:
            console().print(line, markup=False, highlight=False)
        console().print(requests_table(run.handoff))
    else:
        from phaseprof.safe_text import code_block  # noqa: PLC0415

        _echo(code_block("\n".join(lines)))  # verbatim and inert: the run's strings are someone else's
    traces: list[Path] = []
    for name, side in (("prefill", run.record.disagg.prefill), ("decode", run.record.disagg.decode)):
        trace = run_file(p, side.trace, f"disagg.{name}.trace") if side.trace else None
        if trace is not None and trace.is_file():
            traces.append(trace)
        elif side.breakdown and (stored := run_file(p, side.breakdown, f"disagg.{name}.breakdown")).is_file():
            _print_stored(stored, fmt=fmt, console=console, documents=None, title=f"{name} engine ({side.breakdown})")
    return traces


def _step_range(spec: str | None, traces: list[Path], ray: str | None):  # noqa: ANN202 - StepRange | None
    if spec is None:
        return None
    from phaseprof.analysis.step_range import StepRange

    from phaseprof.inputs import InputKind, resolve

    step_range = StepRange.parse(spec)
    if ray is not None or len(traces) != 1 or (str(traces[0]) != "-" and resolve(traces[0]).kind == InputKind.RANKS):
        raise PhaseprofError("--steps takes one trace file (not a rank directory, --ray or several traces)")
    return step_range
