"""The ``phaseprof`` command line. Each stage registers its own sub-commands; all call library functions."""

from __future__ import annotations

import errno
import importlib
import io
import os
import sys
from typing import Any

from phaseprof import __version__
from phaseprof.errors import PhaseprofError
from phaseprof.io import inputs_guarded
from phaseprof.lean_process import leave_out_pyarrow, mark_own_process, single_threaded_blas

#: Each command and the module that registers it (``register(app)``), in the order ``phaseprof --help`` lists them.
#: A run imports only its command's module (``phaseprof analyze`` never imports capture, diff, the dashboard...):
#: imports were most of the time before ``analyze`` read its first byte (1.1 s; ``benchmarks/bench_loader.py``).
COMMAND_MODULES = {
    "analyze": "phaseprof.commands.analyze",
    "capture": "phaseprof.commands.capture",
    "sweep": "phaseprof.commands.capture",
    "memory": "phaseprof.commands.memory",
    "diff": "phaseprof.commands.diff",
    "dashboard": "phaseprof.commands.dashboard",
    "ceilings": "phaseprof.commands.ceilings",
    "pareto": "phaseprof.commands.pareto",
}

_registered: list[str] = []  # modules registered so far, in order
_made: list[Any] = []  # the typer app, made on first use (typer is not imported by a plain ``phaseprof analyze``)


def _print_version(value: bool) -> None:
    import typer

    if value:
        typer.echo(f"phaseprof {__version__}")
        raise typer.Exit(0)


def _typer_app() -> Any:  # noqa: ANN401 - typer.Typer
    if not _made:
        import typer

        app = typer.Typer(
            name="phaseprof",
            help="Where every microsecond of a vLLM prefill and decode step goes.",
            no_args_is_help=True,
            add_completion=False,
            pretty_exceptions_enable=False,
            # click's plain help: rich's help panels shrink the option-name column to fit long help words and cut
            # names (``--gpu-memory-uti…`` at 80 columns); click moves a long option's help to the next line instead.
            rich_markup_mode=None,
        )

        @app.callback()
        def _root(version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                               help="Print the version and exit.")) -> None:
            # Eager: click runs the callback while parsing, before it asks for a command ("Missing command", exit 2).
            pass

        _made.append(app)
    return _made[0]


def _register(command: str | None) -> Any:  # noqa: ANN401 - typer.Typer
    """The app with ``command``'s module registered (``None`` or an unknown name: every command, for the help and
    for click's "No such command"). Heavy dependencies (vllm, torch, streamlit) are imported inside commands."""
    _app = _typer_app()
    wanted = [COMMAND_MODULES[command]] if command in COMMAND_MODULES else list(dict.fromkeys(COMMAND_MODULES.values()))
    if command not in COMMAND_MODULES and _registered != wanted:  # all of them, in the listed order
        _app.registered_commands.clear()
        _registered.clear()
    for name in wanted:
        if name not in _registered:
            importlib.import_module(name).register(_app)
            _registered.append(name)
    # The command list of `phaseprof --help` shows each docstring's first paragraph with its line breaks kept
    # (typer's rich help), ragged at any width; one line each lets it wrap to the terminal.
    for info in _app.registered_commands:
        doc = info.help or (info.callback.__doc__ if info.callback else None)
        if info.short_help is None and doc:
            info.short_help = " ".join(doc.strip().split("\n\n")[0].split())
    return _app


def __getattr__(name: str) -> Any:
    # ``phaseprof.commands.main.app``: the app with every command (tests and tools list them); ``main`` registers one.
    if name == "app":
        return _register(None)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _command(argv: list[str]) -> str | None:
    """The sub-command named in ``argv``: its first word that is not an option (the root's one option, --version,
    takes no value)."""
    return next((a for a in argv if not a.startswith("-")), None)


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
    """Entry point: PhaseprofError becomes one line on stderr and its exit code; so does output that cannot be
    written (:func:`output_failed`: a closed pipe exits 141 quietly). ``phaseprof analyze`` with a plain command
    line runs without typer (``commands.analyze.parse``); every other one goes through typer."""
    try:
        return _main(sys.argv[1:] if argv is None else argv)
    except OSError as e:  # writing the output failed (a read failure is a PhaseprofError naming its file)
        return output_failed(e)
    except SystemExit as e:
        if e.code == 1 and _rich_saw_broken_pipe():
            return output_failed(BrokenPipeError(errno.EPIPE, "Broken pipe"))
        raise


def _main(args: list[str]) -> int:
    if args[:1] == ["analyze"]:
        from phaseprof.commands import analyze

        options = analyze.parse(args[1:])
        if options is not None:
            try:
                with inputs_guarded():
                    analyze.run(**options)
            except PhaseprofError as e:
                return _error(e)
            except KeyboardInterrupt:
                print("aborted", file=sys.stderr)
                return 130
            return 0
    import typer

    app = _register(_command(args))
    try:
        with inputs_guarded():  # no output of this command may replace one of its inputs (phaseprof.io)
            rv = app(args=args, standalone_mode=False)
    except PhaseprofError as e:
        return _error(e)
    except typer.Exit as e:
        return e.exit_code
    except (typer.Abort, KeyboardInterrupt):
        print("aborted", file=sys.stderr)
        return 130
    except Exception as e:
        if isinstance(e, _click_exceptions()):  # usage errors: one line + usage hint, exit 2
            e.show()
            return e.exit_code
        raise
    # With standalone_mode=False, click returns the code of a typer.Exit raised inside a command.
    return rv if isinstance(rv, int) else 0


#: The exit status of a command whose reader went away (a closed pipe: ``phaseprof analyze T | head -1``), as a
#: shell reports a process killed by SIGPIPE (128 + 13): quiet, as ``cat`` and ``yes`` end.
EXIT_BROKEN_PIPE = 141


#: What a failed write says: a full disk or quota, a file too large, an I/O error, a read-only or closed file.
_WRITE_ERRORS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EROFS, errno.EBADF})


def output_failed(e: OSError) -> int:
    """The end of a command whose output could not be written: a closed pipe exits :data:`EXIT_BROKEN_PIPE`
    without a word; anything else (a full disk, a closed stdout) is one line on stderr and exit 3 (the
    environment). Standard output is pointed at /dev/null first, so the interpreter's last flush of what is
    still buffered cannot fail again."""
    _silence_stdout()
    if e.errno == errno.EPIPE:
        return EXIT_BROKEN_PIPE
    if e.filename is None or e.errno in _WRITE_ERRORS:  # standard output, or a file written without its name
        line = f"error: cannot write the output{f' to {e.filename}' if e.filename else ''}: {e.strerror or e}"
    else:  # no input reader lets a raw OSError out (each names its file in a PhaseprofError): one line all the same
        line = f"error: {e.filename}: {e.strerror or e}"
    try:
        print(line, file=sys.stderr)
    except (OSError, ValueError, AttributeError):
        pass  # stderr is gone too: the exit status says it
    return 3


def _silence_stdout() -> None:
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        return
    try:
        if isinstance(sys.stdout, _ClosedStdout) or sys.stdout is None:
            sys.stdout = open(fd, "w", closefd=True)  # noqa: SIM115 - stays open until the process ends
            return
        os.dup2(fd, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        pass
    os.close(fd)


def _rich_saw_broken_pipe() -> bool:
    """Whether a ``SystemExit(1)`` came from a closed pipe: click's (typer's) handler wraps stdout in its
    ``PacifyFlushWrapper`` then exits 1; rich's ``Console.on_broken_pipe`` points stdout at /dev/null, then exits 1."""
    if type(sys.stdout).__name__ == "PacifyFlushWrapper":
        return True
    if "rich.console" not in sys.modules or sys.stdout is None:
        return False
    try:
        return os.path.samestat(os.fstat(sys.stdout.fileno()), os.stat(os.devnull))
    except (OSError, ValueError, io.UnsupportedOperation):
        return False


class _ClosedStdout(io.TextIOBase):
    """Standard output when the process started without one (``phaseprof analyze T >&-``): Python leaves
    ``sys.stdout`` None and every ``print`` silently drops its text; this object makes the first write fail as
    a write to a closed descriptor does, so the command ends with one line and a non-zero exit."""

    encoding = "utf-8"

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        if not s:
            return 0
        raise OSError(errno.EBADF, "standard output is closed")

    def isatty(self) -> bool:
        return False


def _error(e: PhaseprofError) -> int:
    """``e`` as one line on stderr; its exit code."""
    from rich.console import Console

    from phaseprof.safe_text import terminal

    err_console = Console(stderr=True)
    err_console.print(f"[bold red]error:[/] {terminal(str(e))}", highlight=False, soft_wrap=True)
    return e.exit_code


#: Commands that run vLLM or torch in this process: they keep pyarrow, which their libraries may import.
ENGINE_COMMANDS = frozenset({"capture", "sweep", "ceilings"})


def entry() -> int:
    """The ``phaseprof`` program (console script and ``python -m phaseprof.commands.main``): :func:`main`, in a process that
    leaves pyarrow out (``phaseprof.lean_process``) unless the command runs an engine, and that ends an analysis
    without the interpreter's teardown (:func:`exit_without_teardown`). Tests call :func:`main` in their own
    process instead."""
    mark_own_process()
    if sys.stdout is None:
        sys.stdout = _ClosedStdout()
    if _command(sys.argv[1:]) not in ENGINE_COMMANDS:
        leave_out_pyarrow()
        single_threaded_blas()
    code = main()
    try:  # what is still buffered: a closed pipe or a full disk shows here, not in the interpreter's teardown
        sys.stdout.flush()
    except (OSError, ValueError) as e:
        code = output_failed(e) if isinstance(e, OSError) else code
    if sys.argv[1:2] == ["analyze"] and _plain_analyze(sys.argv[2:]):
        exit_without_teardown(code)
    return code


def _plain_analyze(words: list[str]) -> bool:
    """Whether ``phaseprof analyze words`` ran without typer (``commands.analyze.parse``): an analysis, not its help."""
    from phaseprof.commands import analyze

    return analyze.parse(words) is not None


def exit_without_teardown(code: int) -> None:
    """End the process now, with exit status ``code``, skipping the interpreter's teardown: after an analysis it
    frees every table, module and object one by one, 0.025-0.045 s of a 1 s ``phaseprof analyze`` of 117 MB,
    for memory the kernel takes back at once. Output is flushed first. Returns (the caller then exits
    normally) where teardown may still have work: another thread, a child process or Ray is alive, or a flush
    fails (a closed pipe: the normal exit reports it as Python does)."""
    import threading

    mp = sys.modules.get("multiprocessing")
    if threading.active_count() > 1 or "ray" in sys.modules or (mp is not None and mp.active_children()):
        return
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        return
    os._exit(code)


if __name__ == "__main__":
    sys.exit(entry())
