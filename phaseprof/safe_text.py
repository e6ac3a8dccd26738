"""Trace- and user-supplied strings made safe to show: no terminal control, no rich markup, no markdown tricks.

Kernel names, GPU names, bucket names, paths and notes come from files phaseprof did not write. Shown as they
are, ``[/]`` in a name crashes rich (``MarkupError``), ``[link=file:///...]`` turns it into a hyperlink, an ANSI
escape sequence recolours or rewrites the terminal, and a bidi override reorders what the reader sees. Real
demangled C++ names carry brackets (``void f<T>(...) [with T = float]``), so brackets must print verbatim.

The renderers stay simple: the CLI hands them a copy of the result with every string made safe once
(:func:`for_terminal`, :func:`for_markdown`); numbers are untouched. JSON output needs none of this (its
encoder escapes control characters).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any, TypeVar

from rich.markup import escape as _rich_escape

T = TypeVar("T")

# ANSI/VT escape sequences (CSI ... final byte, OSC ... BEL/ST, two-byte ESC x), then any C0/C1 control
# character, DEL, and the Unicode bidi embedding/override/isolate controls ("trojan source").
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-_]|\x9b[0-?]*[ -/]*[@-~]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def plain(text: str) -> str:
    """``text`` without escape sequences and control characters (tabs and newlines become spaces)."""
    if text.isprintable():  # the common case: nothing to strip (isprintable is False for all of the above)
        return text
    text = _ANSI.sub("", text)
    return _CONTROL.sub(lambda m: " " if m.group() in "\t\n\r" else "", text)


def terminal(text: str) -> str:
    """``text`` for rich: control stripped, markup escaped (``[with T = float]`` prints as written)."""
    return _rich_escape(plain(text))


# Every ASCII punctuation character markdown or GFM could act on (CommonMark lets any of them be backslash-escaped):
# emphasis, code, links and images, raw HTML, entities, tables, strikethrough, headings, math (``$``). ``:``, the
# ``//`` after it, ``@`` and the ``.`` of ``www.`` too: GFM autolinks ``http://host``, ``www.host`` and
# ``a@b.c`` in plain text, and escaping them breaks the pattern it looks for (the text still reads as written).
_MD_ACTIVE = re.compile(r"[\\`*_\[\]<>!|~#&:@$]|(?<=[wW]{3})\.|(?<=:)/|(?<=:/)/")


def markdown(text: str) -> str:
    """``text`` for running markdown text or a table cell (not a code span): control stripped, every character
    markdown could act on backslash-escaped, so ``![x](http://host/t.png)``, ``<img ...>``, ``www.host`` or a
    bare ``http://`` link stays text. The one markdown escaper: every string that came from a trace, a
    breakdown or a config goes through it (or :func:`code_span`) on every markdown path."""
    return _MD_ACTIVE.sub(lambda m: "\\" + m.group(), plain(text).replace("\n", " "))


def code_span(text: str, *, table_cell: bool = True) -> str:
    """``text`` as one inline code span: control stripped, fenced by one backtick more than its longest run of
    backticks (a name holding a backtick cannot close the span early and let what follows render), padded with a
    space where it starts or ends with a backtick. In a GFM table cell ``|`` still splits the row even inside a
    code span, so it is written ``\\|`` (GFM removes the backslash)."""
    body = plain(text).replace("\n", " ")
    if table_cell:
        body = body.replace("|", "\\|")
    longest = max((len(r) for r in re.findall(r"`+", body)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if body.startswith("`") or body.endswith("`") or not body.strip() else ""
    return f"{fence}{pad}{body}{pad}{fence}"


def deep(value: T, fix: Callable[[str], str]) -> T:
    """A copy of ``value`` with ``fix`` applied to every string in it: dataclass fields, dict keys and values,
    list and tuple items (numbers and other objects are kept as they are)."""
    return _deep(value, fix)


def _deep(v: Any, fix: Callable[[str], str]) -> Any:
    if isinstance(v, str):
        return fix(v)
    if isinstance(v, dict):
        return {_deep(k, fix): _deep(x, fix) for k, x in v.items()}
    if isinstance(v, (list, tuple)) and not hasattr(v, "_fields"):
        return type(v)(_deep(x, fix) for x in v)
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        changes = {f.name: _deep(getattr(v, f.name), fix) for f in dataclasses.fields(v) if f.init}
        return dataclasses.replace(v, **changes)
    return v


def for_terminal(value: T) -> T:
    """:func:`deep` with :func:`terminal`: a result ready for rich rendering."""
    return deep(value, terminal)


def for_markdown(value: T) -> T:
    """:func:`deep` with :func:`plain`: a result ready for a markdown renderer, which still escapes what it puts
    outside code spans with :func:`markdown` (inside a code span, escapes would print)."""
    return deep(value, plain)
