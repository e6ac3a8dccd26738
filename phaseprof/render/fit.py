"""Tables that fit the terminal with every header and number whole.

Rich shrinks a too-wide table by cutting cells to ``pha…`` / ``9,33…``. Here a table is split instead: the key
columns (e.g. ``bucket``) repeat in each part and the other columns are packed greedily into parts that fit the
console width. Numbers and headers never wrap; only columns marked ``fold`` (long names) wrap inside their cell.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

FOLD_MIN_WIDTH = 24  # a folded name column never gets narrower than this (fewer, longer lines read better)
_BORDER = 3  # per column: one border character and one space of padding either side


@dataclass(frozen=True)
class Col:
    """One column: header, alignment, and ``fold`` for long names that may wrap (never for numbers)."""

    header: str
    justify: str = "right"
    fold: bool = False


def cell_len(markup: str) -> int:
    """Terminal cells of a cell's text once its rich markup is rendered."""
    return Text.from_markup(markup).cell_len


def _needs(cols: Sequence[Col], rows: Sequence[Sequence[str]]) -> list[int]:
    out = []
    for i, c in enumerate(cols):
        longest = max([cell_len(c.header)] + [cell_len(r[i]) for r in rows])
        out.append(max(cell_len(c.header), min(longest, FOLD_MIN_WIDTH)) if c.fold else longest)
    return out


def split_columns(needs: Sequence[int], *, keys: int, width: int) -> list[list[int]]:
    """Indices of the non-key columns, packed in order into groups whose table (keys + group) fits ``width``.

    A column too wide even beside the keys alone gets a group of its own (nothing better is possible).
    """
    base = 1 + sum(n + _BORDER for n in needs[:keys])
    groups: list[list[int]] = []
    used = width + 1
    for i in range(keys, len(needs)):
        w = needs[i] + _BORDER
        if used + w > width:
            groups.append([])
            used = base
        groups[-1].append(i)
        used += w
    return groups or [[]]


def fitted_tables(title: str, cols: Sequence[Col], rows: Sequence[Sequence[str]], *, width: int, keys: int = 1,
                  caption: str | None = None, sections: Sequence[int] = (), compact: bool = False) -> list[Table]:
    """``rows`` as one table, or several when one would be wider than ``width`` (titles then say ``part i/n``).

    ``sections``: row indices after which a horizontal rule is drawn. ``compact``: no outer border (two lines
    fewer per table, for reports meant to be read in one screen).
    """
    needs = _needs(cols, rows)
    groups = split_columns(needs, keys=keys, width=width)
    tables = []
    for g, group in enumerate(groups, 1):
        idx = list(range(keys)) + group
        part = f" (part {g}/{len(groups)})" if len(groups) > 1 else ""
        t = Table(title=title + part, title_justify="left", caption=caption if g == len(groups) else None,
                  caption_justify="left", **({"box": box.SIMPLE_HEAD, "show_edge": False} if compact else {}))
        for i in idx:
            c = cols[i]
            if c.fold:
                t.add_column(c.header, justify=c.justify, overflow="fold", min_width=needs[i])
            else:
                t.add_column(c.header, justify=c.justify, no_wrap=True, min_width=needs[i])
        for r, row in enumerate(rows):
            # a compact table's rule would be a blank line: its sections are left out
            t.add_row(*(row[i] for i in idx), end_section=r in sections and not compact)
        tables.append(t)
    return tables


def print_fitted(console: Console, title: str, cols: Sequence[Col], rows: Sequence[Sequence[str]], *,
                 keys: int = 1, caption: str | None = None, sections: Sequence[int] = (),
                 compact: bool = False) -> None:
    """Print ``fitted_tables`` at the console's width."""
    for t in fitted_tables(title, cols, rows, width=console.width, keys=keys, caption=caption, sections=sections,
                           compact=compact):
        console.print(t)
