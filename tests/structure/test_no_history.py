"""No comment, docstring or note in ``phaseprof/`` or ``tests/`` names the ticket or work session it came from: a
line says why it is there, which stays true when the tracker's numbers mean nothing to the reader."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ROOTS = ("phaseprof", "tests")
SUFFIXES = {".py", ".toml", ".md"}
# A ticket or session number: the word, then its number, with or without "#". Spelled with character classes so
# this file's own source does not match it.
HISTORY = re.compile(r"\b[Ii]ssue ?#?[0-9]+|\b[Ss]ession ?#?[0-9]+")


def _sources() -> list[Path]:
    return sorted(p for root in ROOTS for p in (REPO / root).rglob("*")
                  if p.suffix in SUFFIXES and p.is_file() and "__pycache__" not in p.parts)


def test_no_ticket_or_session_numbers() -> None:
    found = []
    for path in _sources():
        rel = path.relative_to(REPO).as_posix()
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if m := HISTORY.search(line):
                found.append(f"{rel}:{n}: {m.group(0)!r}")
    assert not found, "say why, not which ticket or session:\n" + "\n".join(found)


def test_the_pattern_catches_what_it_is_for() -> None:
    """The scan is only as good as its pattern: every spelling it is meant to refuse, and none of the ordinary
    words it must let through."""
    i, s = "issue", "session"  # never followed by a number in this file's source
    refused = [f"({i} 28: a frame per call)", f"{i.title()} #44, item 3:", f"{s} 6's runs", f"{s.title()} 7:",
               f"{i}12"]
    allowed = ["st.session_state", "a session of the engine", "[[kernel]] #3", "the issue here", "sessions"]
    assert all(HISTORY.search(s) for s in refused)
    assert not any(HISTORY.search(s) for s in allowed)
    assert _sources(), "nothing scanned: the roots moved"
