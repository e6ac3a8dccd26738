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
from enum import Enum
from typing import Any, TypeVar

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
    from rich.markup import escape  # here: a run that prints JSON never imports rich

    return escape(plain(text))


# Every ASCII punctuation character markdown or GFM could act on (CommonMark lets any of them be backslash-escaped):
# emphasis, code, links and images, raw HTML, entities, tables, strikethrough, headings, math (``$``). A ``:``
# before ``/``, the ``//`` after it, ``@`` and the ``.`` of ``www.`` too: GFM autolinks ``http://host``,
# ``www.host`` and ``a@b.c`` in plain text, and escaping them breaks the pattern it looks for (the text still
# reads as written). Any other ``:`` stays as it is ("per GPU: total", not "per GPU\: total").
_MD_ACTIVE = re.compile(r"[\\`*_\[\]<>!|~#&@$]|:(?=/)|(?<=[wW]{3})\.|(?<=:)/|(?<=:/)/")


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


#: What JSON leaves raw in its strings but a terminal acts on: DEL, the C1 controls (``\x9b`` is a CSI on some
#: terminals), the bidi controls, the line and paragraph separators.
_JSON_RAW = re.compile("[\x7f-\x9f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def json_inert(text: str) -> str:
    """JSON text (an encoder's output) with what :data:`_JSON_RAW` names written as ``\\uXXXX`` escapes: the same
    document once parsed, inert when printed (the encoder escapes C0 controls already; JSON's structure is
    ASCII, so these characters can only be inside strings, keys included)."""
    if text.isascii() and "\x7f" not in text:
        return text
    return _JSON_RAW.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def code_block(text: str, *, info: str = "text") -> str:
    """``text`` as a fenced markdown code block, shown verbatim (aligned columns kept, nothing live): control
    stripped, fenced by more backticks than its longest run (three at least), so no line of it can close the
    block early."""
    body = "\n".join(plain(line) for line in text.split("\n"))
    longest = max((len(r) for r in re.findall(r"`+", body)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{info}\n{body}\n{fence}"


def deep(value: T, fix: Callable[[str], str]) -> T:
    """A copy of ``value`` with ``fix`` applied to every string in it: dataclass and msgspec Struct fields, dict
    keys and values, list and tuple items (numbers and other objects are kept as they are)."""
    return _deep(value, fix)


def _deep(v: Any, fix: Callable[[str], str]) -> Any:
    if isinstance(v, Enum):  # a StrEnum member is the code's own text; a plain str copy breaks `is` and `match`
        return v
    if isinstance(v, str):
        return fix(v)
    if isinstance(v, dict):
        return {_deep(k, fix): _deep(x, fix) for k, x in v.items()}
    if isinstance(v, (list, tuple)) and not hasattr(v, "_fields"):
        return type(v)(_deep(x, fix) for x in v)
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        changes = {f.name: _deep(getattr(v, f.name), fix) for f in dataclasses.fields(v) if f.init}
        return dataclasses.replace(v, **changes)
    fields = getattr(type(v), "__struct_fields__", None)  # a msgspec Struct (run records, handoff, pareto)
    if fields is not None and not isinstance(v, type):
        import msgspec  # noqa: PLC0415 - only records made of Structs come here

        return msgspec.structs.replace(v, **{f: _deep(getattr(v, f), fix) for f in fields})
    return v


def for_terminal(value: T) -> T:
    """:func:`deep` with :func:`terminal`: a result ready for rich rendering."""
    return deep(value, terminal)


def for_markdown(value: T) -> T:
    """:func:`deep` with :func:`plain`: a result ready for a markdown renderer, which still escapes what it puts
    outside code spans with :func:`markdown` (inside a code span, escapes would print)."""
    return deep(value, plain)


# --------------------------------------------------------------------------------------- the dashboard's page
# Streamlit renders markdown (remark-gfm) in text, captions, titles, alert boxes and widget labels, and plotly
# reads every label, tick, legend name and hover text as pseudo-HTML. A trace, a breakdown or a run record is a
# file someone else wrote, so every string from one reaches the page through :func:`page_markdown` or
# :func:`plotly_text`, and every figure through :func:`plotly_figure`.

#: The ASCII punctuation that starts or ends markdown syntax, Streamlit's included (LaTeX ``$``,
#: ``:red[...]`` directives, ``:material/...:``): CommonMark makes any backslash-escaped ASCII punctuation literal.
_PAGE_MD_PUNCT = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$:&=^@])")
#: Line breaks and separators (a newline would start a block: a heading, a list) and the controls :func:`plain`
#: strips.
_LINE = re.compile("[\u2028\u2029]")
#: GFM's literal autolinks (``http://``/``https://``, ``www.``, ``a@b.c``; remark-gfm finds them in the *parsed*
#: text, after backslash escapes are gone, so escaping cannot stop them): a WORD JOINER (U+2060, invisible, no
#: line break) inside the trigger leaves the text as it reads and breaks the match.
_AUTOLINK = re.compile(r"(?i)(?<=[a-z0-9+.-])(?=://)|(?<=www)(?=\.)|(?<=@)")
WORD_JOINER = "\u2060"


def unlinked(text: str) -> str:
    """``text`` with a WORD JOINER inside every autolink trigger (``http\u2060://``, ``www\u2060.``, ``a@\u2060b``)."""
    return _AUTOLINK.sub(WORD_JOINER, text)


def page_markdown(text: str) -> str:
    """``text`` as literal Streamlit markdown on one line: control stripped, every markdown punctuation character
    backslash-escaped (links, images, emphasis, HTML, LaTeX, directives) and autolinks broken (:func:`unlinked`).
    Not for code spans (escapes would print there)."""
    one_line = _LINE.sub(" ", plain(text).replace("\n", " "))
    return _PAGE_MD_PUNCT.sub(r"\\\1", unlinked(one_line))


def plotly_text(text: str) -> str:
    """``text`` for a plotly title, tick label, legend name, marker or hover text, or a value a hovertemplate
    shows: control stripped, ``&``, ``<`` and ``>`` as entities, which plotly shows as the characters (so no
    ``<a href>``, ``<span style>``, ``<b>`` or ``<br>`` from ``text`` becomes markup, and ``gemm<float, 128>``
    shows whole)."""
    return plain(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


#: The only tags a finished figure may carry: line breaks and the hover box's empty ``<extra></extra>``, which the
#: dashboard's own templates write.
_OWN_TAG = re.compile(r"<(?!(?:br|extra|/extra)>)")
#: Figure keys whose strings are never shown as text (a colour, a font, an enum).
_NOT_TEXT = frozenset({"template", "uid", "type", "mode", "orientation", "barmode", "hoverinfo", "textposition",
                       "fill", "xaxis", "yaxis", "xref", "yref", "anchor", "overlaying", "side"})


def plotly_figure(spec: dict[str, Any]) -> dict[str, Any]:
    """A copy of a plotly figure's JSON (``fig.to_plotly_json()``) in which no string can be markup except the
    builders' own ``<br>`` and ``<extra></extra>``: any other ``<`` becomes ``&lt;``. Strings already passed
    through :func:`plotly_text` are unchanged, so this is the net behind every figure, including ones built
    elsewhere (the roofline) from raw names; ``layout.template`` (plotly's own) is kept as it is."""
    return _figure(spec)


def _figure(v: Any, key: str = "") -> Any:
    if isinstance(v, str):
        return v if key in _NOT_TEXT else _OWN_TAG.sub("&lt;", plain(v))
    if isinstance(v, dict):
        return {k: (x if k == "template" else _figure(x, k)) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_figure(x, key) for x in v]
    if hasattr(v, "tolist"):  # numpy arrays (category labels may be an object array of names)
        return _figure(v.tolist(), key)
    return v
