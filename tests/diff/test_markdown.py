"""The PR-comment markdown: parsed with markdown-it-py (tables, the details block) and always < 65,000 chars."""

from __future__ import annotations

import html as html_lib

from markdown_it import MarkdownIt

from phaseprof.report.diff import diff_breakdowns
from phaseprof.report.diff_markdown import MAX_CHARS, diff_markdown
from phaseprof.report.fail_on import evaluate, parse_threshold

from .builders import K, breakdown, phase

MD = MarkdownIt("commonmark").enable("table")


def tables(md: str) -> list[list[list[str]]]:
    """Every table as rows of cell texts (header row first)."""
    out, rows, row = [], None, None
    for t in MD.parse(md):
        if t.type == "table_open":
            rows = []
        elif t.type == "tr_open":
            row = []
        elif t.type == "inline" and rows is not None and row is not None:
            row.append(t.content)
        elif t.type == "tr_close":
            rows.append(row)
            row = None
        elif t.type == "table_close":
            out.append(rows)
            rows = None
    return out


def _diff(n_kernels: int = 3, name_len: int = 20):
    ka = [K(f"sm90_xmma_{i}_" + "x" * name_len, "gemm", 10, 100.0 + i) for i in range(n_kernels)]
    kb = [K(f"Cijk_Alik_{i}_" + "y" * name_len, "gemm", 10, 90.0 + i) for i in range(n_kernels)]
    a = breakdown(phase("decode", kernels=ka + [K("fa3|pipe`tick", "attention", 10, 50.0)]))
    b = breakdown(phase("decode", kernels=kb + [K("fmhaSm100|pipe", "attention", 10, 40.0)]), gpu="NVIDIA B200")
    return diff_breakdowns(a, b)


def test_headline_first_then_full_tables_in_details():
    d = _diff()
    checks = evaluate([parse_threshold("attention.share > +50pp")], d)
    md = diff_markdown(d, checks=checks)
    tokens = MD.parse(md)
    html = [t.content for t in tokens if t.type == "html_block"]
    assert any(h.startswith("<details><summary>") for h in html) and any("</details>" in h for h in html)
    head, details = md.split("<details>", 1)
    shown = html_lib.unescape(MD.render(head))  # as rendered: escaped markdown characters read as written
    assert "GPU differs" in shown and "✅" in shown and "attention.share > +50pp" in shown
    assert "wall ms/step" in head and "launch calls/step" in head
    ts = tables(md)
    assert len(tables(head)) == 1 and len(ts) >= 6  # headline + comparability, metrics, 2 views, APIs, kernels
    kernel_table = ts[-1]
    assert kernel_table[0][:4] == ["bucket", "module", "A kernel", "B kernel"]
    # every row has the header's cell count: '|' and '`' in kernel names did not break the table
    assert all(len(r) == len(kernel_table[0]) for r in kernel_table)
    assert any("fa3|pipe`tick" in c for r in kernel_table for c in r)  # verbatim: a longer fence, not a lossy '


def test_huge_input_stays_under_the_limit_with_a_note():
    d = _diff(n_kernels=3000, name_len=5000)
    md = diff_markdown(d)
    assert len(md) < MAX_CHARS
    assert "more line(s) left out to stay under 65,000 characters" in md
    assert md.rstrip().endswith("</details>")
    assert any(t.type == "table_open" for t in MD.parse(md))


def test_small_limit_still_respected():
    d = _diff(n_kernels=50)
    for limit in (2_000, 5_000, 20_000):
        assert len(diff_markdown(d, max_chars=limit)) < limit
