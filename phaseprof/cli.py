"""The ``phaseprof`` command line. Each stage registers its own sub-commands; all call library functions."""

from __future__ import annotations

import sys

import typer
from rich.console import Console

from phaseprof import __version__
from phaseprof.errors import PhaseprofError
from phaseprof.io import inputs_guarded
from phaseprof.lean_process import leave_out_pyarrow
from phaseprof.safe_text import terminal

app = typer.Typer(
    name="phaseprof",
    help="Where every microsecond of a vLLM prefill and decode step goes.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # click's plain help: rich's help panels shrink the option-name column to fit long help words and cut names
    # (``--gpu-memory-uti…`` at 80 columns); click moves a long option's help to the next line instead.
    rich_markup_mode=None,
)
err_console = Console(stderr=True)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"phaseprof {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                       help="Print the version and exit.")) -> None:
    # Eager: click runs the callback while parsing, before it asks for a command ("Missing command", exit 2).
    pass


def _register_all() -> None:
    # Each stage owns its CLI module; heavy dependencies (vllm, torch, streamlit) are imported lazily inside commands.
    from phaseprof.capture import cli as capture_cli
    from phaseprof.memory import cli as memory_cli
    from phaseprof.report import analyze_cli, diff_cli
    from phaseprof.dashboard import cli as dashboard_cli
    from phaseprof.sol import cli as sol_cli

    for mod in (analyze_cli, capture_cli, memory_cli, diff_cli, dashboard_cli, sol_cli):
        mod.register(app)
    # The command list of `phaseprof --help` shows each docstring's first paragraph with its line breaks kept
    # (typer's rich help), ragged at any width; one line each lets it wrap to the terminal.
    for info in app.registered_commands:
        doc = info.help or (info.callback.__doc__ if info.callback else None)
        if info.short_help is None and doc:
            info.short_help = " ".join(doc.strip().split("\n\n")[0].split())


_register_all()


def _click_exceptions() -> tuple[type[BaseException], ...]:
    # typer >= 0.20 vendors click as typer._click; older typer uses click itself. Accept both.
    kinds: list[type[BaseException]] = []
    for mod in ("typer._click.exceptions", "click.exceptions"):
        try:
            kinds.append(__import__(mod, fromlist=["ClickException"]).ClickException)
        except ImportError:
            pass
    return tuple(kinds)


def main(argv: list[str] | None = None) -> int:
    """Entry point: PhaseprofError becomes one line on stderr and its exit code."""
    try:
        with inputs_guarded():  # no output of this command may replace one of its inputs (phaseprof.io)
            rv = app(args=argv, standalone_mode=False)
    except PhaseprofError as e:
        err_console.print(f"[bold red]error:[/] {terminal(str(e))}", highlight=False, soft_wrap=True)
        return e.exit_code
    except typer.Exit as e:
        return e.exit_code
    except (typer.Abort, KeyboardInterrupt):
        err_console.print("aborted")
        return 130
    except Exception as e:
        if isinstance(e, _click_exceptions()):  # usage errors: one line + usage hint, exit 2
            e.show()
            return e.exit_code
        raise
    # With standalone_mode=False, click returns the code of a typer.Exit raised inside a command.
    return rv if isinstance(rv, int) else 0


#: Commands that run vLLM or torch in this process: they keep pyarrow, which their libraries may import.
ENGINE_COMMANDS = frozenset({"capture", "sweep", "ceilings"})


def entry() -> int:
    """The ``phaseprof`` program (console script and ``python -m phaseprof.cli``): :func:`main`, in a process that
    leaves pyarrow out (``phaseprof.lean_process``) unless the command runs an engine. Tests call :func:`main`
    in their own process instead."""
    command = next((a for a in sys.argv[1:] if not a.startswith("-")), None)
    if command not in ENGINE_COMMANDS:
        leave_out_pyarrow()
    return main()


if __name__ == "__main__":
    sys.exit(entry())
