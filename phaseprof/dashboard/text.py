"""Untrusted text (kernel and GPU names, paths, file names, error messages) made inert for Streamlit markdown.

Streamlit renders markdown in ``st.markdown``/``st.write``, titles, captions, alert boxes, widget and expander
labels and ``st.table`` cells: an image (``![x](http://host/track.png)``) there makes the browser fetch the URL,
a link becomes clickable (a bare ``http://``, ``www.`` or ``a@b`` too: GFM autolinks), ``$...$`` becomes LaTeX,
``:red[...]`` colours text. Every string that comes from a trace, a run directory or the user passes through
:func:`md` (or :func:`code`) before it reaches one of them, and through :func:`plot` before it reaches a plotly
figure; every figure reaches the page through ``widgets.chart`` (``safe_text.plotly_figure``, the net behind it).
No Streamlit here: plain functions, tested directly.
"""

from __future__ import annotations

import re
from typing import Any

from phaseprof import safe_text

#: C0/C1 control characters and line/paragraph separators: a newline would start a block (a heading, a list).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def plain(value: Any) -> str:
    """``value`` as one line: control characters (newlines, NUL, ANSI escapes' ESC) become spaces."""
    return _CONTROL.sub(" ", str(value))


def short(value: Any, limit: int = 120) -> str:
    """``value`` as one line of at most ``limit`` characters (the middle cut out: names differ at the ends)."""
    text = plain(value)
    if len(text) <= limit:
        return text
    keep = (limit - 1) // 2
    return f"{text[:keep]}…{text[len(text) - (limit - 1 - keep):]}"


def md(value: Any) -> str:
    """``value`` as literal markdown text (``safe_text.page_markdown``): markdown punctuation backslash-escaped,
    autolinks (``http://``, ``www.``, ``a@b``) broken by an invisible WORD JOINER, on one line."""
    return safe_text.page_markdown(plain(value))


def code(value: Any) -> str:
    """``value`` as an inline code span (nothing inside a code span is markdown), one line."""
    text = plain(value)
    ticks = max((len(m) for m in re.findall(r"`+", text)), default=0) + 1
    fence = "`" * ticks
    pad = " " if text.startswith(("`", " ")) or text.endswith(("`", " ")) or not text else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def plot(value: Any) -> str:
    """``value`` for a plotly label or hover text, which plotly reads as pseudo-HTML (``<a href>``, ``<span
    style>``, ``<br>``): ``<``, ``>`` and ``&`` become entities, which plotly shows as the characters. Kernel
    names such as ``void gemm<float, 128>(...)`` then show whole instead of losing their template part."""
    return safe_text.plotly_text(plain(value))


def md_frame(df: Any) -> Any:
    """A copy of a DataFrame for ``st.table`` (whose cells are markdown) with every string cell escaped."""
    from pandas.api.types import is_numeric_dtype

    return df.apply(lambda col: col if is_numeric_dtype(col) else col.map(lambda v: md(v) if isinstance(v, str)
                                                                            else v)
                    ).rename(columns=lambda c: md(c) if isinstance(c, str) else c)
