"""Every command ends cleanly when its output goes away. ``analyze ... | head -1`` (the reader
closes the pipe) exits 141 without a word, as ``cat`` does; a closed stdout (``>&-``) and a full disk
(``> /dev/full``) are one line on stderr and exit 3 (the environment). Never a traceback, never the interpreter's
"Exception ignored" on its last flush.

Each case runs the console script's ``entry`` in a child process: the failure is the process' own stdout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import REPO

TRACE = REPO / "traces/cpu/tiny-hybrid-prefill128-decode8/trace.json.gz"
SWEEP = REPO / "traces/h200/serving/bf16/decode"
_CHILD = ("import sys\n"
          "sys.argv = ['phaseprof', *sys.argv[1:]]\n"
          "from phaseprof.commands.main import entry\n"
          "sys.exit(entry())\n")
COMMANDS = {
    "analyze-table": ["analyze", str(TRACE)],
    "analyze-markdown": ["analyze", str(TRACE), "-f", "markdown"],
    "analyze-json": ["analyze", str(TRACE), "-f", "json"],
    "pareto-table": ["pareto", str(SWEEP)],
    "pareto-json": ["pareto", str(SWEEP), "--format", "json"],
    "ceilings-show": ["ceilings", "--show"],
}


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}


def _run(args: list[str], *, stdout: str) -> tuple[int, str]:
    """(exit status, stderr) of the program with its stdout ``closed_pipe`` (read end closed before anything is
    written), ``closed`` (no fd 1 at all) or ``full`` (/dev/full)."""
    cmd = [sys.executable, "-c", _CHILD, *args]
    if stdout == "closed_pipe":
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()  # the reader is gone before the first byte: every write is EPIPE
        err = proc.stderr.read().decode()
        return proc.wait(timeout=300), err
    if stdout == "closed":
        res = subprocess.run(cmd, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, env=_env(), timeout=300,
                             preexec_fn=lambda: os.close(1))  # noqa: PLW1509 - the child's own fd 1 only
        return res.returncode, res.stderr.decode()
    with open("/dev/full", "wb") as full:
        res = subprocess.run(cmd, stdout=full, stderr=subprocess.PIPE, env=_env(), timeout=300)
    return res.returncode, res.stderr.decode()


@pytest.mark.parametrize("name", list(COMMANDS))
def test_closed_pipe_is_a_quiet_141(name: str) -> None:
    code, err = _run(COMMANDS[name], stdout="closed_pipe")
    assert code == 141, (code, err)
    assert err.strip() == "", err


@pytest.mark.parametrize("name", list(COMMANDS))
@pytest.mark.parametrize("stdout", ["closed", "full"])
@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs Linux's /dev/full")
def test_unwritable_stdout_is_one_line_exit_3(name: str, stdout: str) -> None:
    code, err = _run(COMMANDS[name], stdout=stdout)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 3 and len(lines) == 1, (code, err)
    assert lines[0].startswith("error: cannot write the output: ")
    assert ("No space left" in lines[0]) if stdout == "full" else ("closed" in lines[0])
