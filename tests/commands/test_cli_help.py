"""``phaseprof --version`` and the ``--help`` of every command, read at 80 columns: nothing cut, nothing wider.

Typer's rich help panels shrank the option-name column to fit long help words (``--gpu-memory-uti…`` in
``memory --help``); the CLI uses click's plain help, which moves a long option's help to the next line instead.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main

from phaseprof import __version__
from phaseprof.commands.main import app, main

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = sorted(c.name for c in app.registered_commands)


def _help(*argv: str) -> str:
    env = {**os.environ, "COLUMNS": "80", "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-m", "phaseprof.commands.main", *argv, "--help"], capture_output=True, text=True,
                         env=env, cwd=ROOT, check=True)
    return res.stdout


def test_version_prints_and_exits_zero(capsys) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"phaseprof {__version__}"


def test_version_as_a_program() -> None:
    res = subprocess.run([sys.executable, "-m", "phaseprof.commands.main", "--version"], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
    assert (res.returncode, res.stdout.strip()) == (0, f"phaseprof {__version__}")


def test_top_level_help_lists_every_command() -> None:
    out = _help()
    assert max(map(len, out.splitlines())) <= 80
    listed = re.findall(r"^  (\w+)\s{2,}", out.split("Commands:", 1)[1], flags=re.M)
    assert sorted(listed) == COMMANDS


@pytest.mark.parametrize("command", COMMANDS)
def test_command_help_fits_80_columns_with_option_names_whole(command: str) -> None:
    out = _help(command)
    assert "…" not in out
    assert max(map(len, out.splitlines())) <= 80
    # every long option the command declares appears whole at the start of an option line
    cmd = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    declared = {o for p in cmd.params for o in p.opts + p.secondary_opts if o.startswith("--")}
    shown = set(re.findall(r"^\s+(?:-\w+, )?(--[\w-]+)", out, flags=re.M))
    shown |= set(re.findall(r" / (--[\w-]+)", out))
    assert declared <= shown, sorted(declared - shown)
