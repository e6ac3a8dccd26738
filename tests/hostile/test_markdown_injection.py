"""Markdown injection. A kernel name holding a backtick closed its code span in ``analyze -f
markdown`` and the ``![b](http://...)`` and ``<img>`` after it rendered live in a PR comment; ``diff -f markdown``
wrote bucket and phase names from a breakdown file unescaped. Every string from a trace or a breakdown now goes
through ``phaseprof.safe_text`` (``markdown`` for text and table cells, ``code_span`` for names in code), and the
output is rendered here with markdown-it (CommonMark + GFM tables): no link, image or raw HTML element, and no
bare URL, ``www.`` or e-mail address a GFM autolinker would turn into a link."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from phaseprof.commands.main import main
from phaseprof.safe_text import code_span, markdown, plain
from tests.hostile.test_escaping import _trace

from ..conftest import REPO

RUN = REPO / "traces/h200/graph/20261130T094740Z-h200-qwen3.5-35b-a3b-prefill-4096"
IMG = "![b](http://127.0.0.1:9/t.png)"
# Two traces of five kernels each: the markdown lists the top five kernels of a bucket.
NAMES = [[f"void k`<T>`() {IMG} <img src=x onerror=alert(1)>", "a``b` ``` x`", "`", "<script>alert(1)</script>",
          "| pipe | in | name |"],
         ["see http://evil.example/x and www.evil.example and me@evil.example", "[click](javascript:alert(1))",
          "$\\frac{1}{0}$ ~~gone~~ **bold**", "x &amp; &#60;b&#62; <!-- c -->", "1. list\n# heading"]]
_MD = MarkdownIt("commonmark").enable("table")


def _live(source: str) -> list[str]:
    """What would be live once ``source`` is rendered: HTML elements other than the ones markdown structure makes,
    and text a GFM autolinker would link. GFM links bare URLs, ``www.`` and addresses found inside one text node
    (cmark-gfm's autolink extension); a backslash escape splits the node, so the text nodes are checked with
    markdown-it's escape joining turned off."""
    rendered = _MD.render(source)
    tags = set(re.findall(r"<([a-zA-Z][a-zA-Z0-9]*)", rendered))
    bad = sorted(tags - {"h3", "h4", "p", "table", "thead", "tbody", "tr", "th", "td", "code", "strong", "em",
                         "ul", "li", "blockquote", "br"})
    texts = [c.content for t in _RAW.parse(source) if t.type == "inline" for c in t.children or []
             if c.type == "text"]
    return bad + [m for x in texts for m in _AUTOLINK.findall(x)]


_RAW = MarkdownIt("commonmark").enable("table").disable("text_join")
_AUTOLINK = re.compile(r"(?i)(?:https?://|www\.)\S+|[\w.+-]+@[\w-]+\.[\w.]+")


def _details_ok(out: str) -> str:
    # The report's own collapsible sections are raw HTML phaseprof writes; take them out before checking.
    return out.replace("<details><summary>", "").replace("</summary>", "").replace("</details>", "")


@pytest.mark.parametrize("names", NAMES, ids=["code-spans", "autolinks"])
def test_analyze_markdown_names_are_inert(names: list[str], tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    trace = _trace(tmp_path / "t.json", names)
    assert main(["analyze", str(trace), "-f", "markdown"]) == 0
    out = capsys.readouterr().out
    assert _live(_details_ok(out)) == [], _live(_details_ok(out))
    rendered = _MD.render(out)
    codes = [html.unescape(c) for c in re.findall(r"<code>(.*?)</code>", rendered, flags=re.S)]
    # Every kernel name is one whole code span as written (a backtick inside cannot end it early).
    assert sorted(c.strip() for c in codes) == sorted([plain(n).replace("\n", " ").strip() for n in names] + ["t.json"])


def _hostile_breakdown(path: Path, bucket: str, phase: str) -> Path:
    doc = json.loads((RUN / "breakdown.json").read_text())
    for ph in doc["phases"]:
        ph["phase"] = phase
        for view in ("kernel_view", "module_view"):
            if ph[view]:
                ph[view][0]["bucket"] = bucket
    for s in doc["steps"]:
        s["phase"] = phase
    path.write_text(json.dumps(doc))
    return path


def test_diff_markdown_bucket_and_phase_names_are_inert(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = _hostile_breakdown(tmp_path / "a.json", IMG + " <script>x</script>", "pre<img src=x>fill www.evil.example")
    b = _hostile_breakdown(tmp_path / "b.json", IMG + " <script>x</script>", "pre<img src=x>fill www.evil.example")
    assert main(["diff", str(a), str(b), "-f", "markdown"]) == 0
    out = capsys.readouterr().out
    assert _live(_details_ok(out)) == [], _live(_details_ok(out))
    assert "pre&lt;img src=x&gt;fill" in _MD.render(out)  # the name is shown, as text


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("`*_[]()<>!|~#&:@$/\\.-= \nwhtpsxa1")), max_size=40))
def test_escapers_render_as_written(text: str) -> None:
    """Any text in a table cell renders as exactly its plain text; as a code span, as one code element holding it."""
    shown = plain(text).replace("\n", " ")
    source = f"| h |\n|---|\n| {markdown(text)} |\n"
    assert not _live(source), (text, source)
    cell = _MD.render(source)
    assert html.unescape(re.sub(r"<[^>]+>", "", cell.split("<tbody>")[1]) if "<tbody>" in cell else "").strip() \
        == shown.strip()
    span = _MD.render(f"| h |\n|---|\n| {code_span(text)} |\n")
    if shown.strip():
        codes = re.findall(r"<code>(.*?)</code>", span, flags=re.S)
        assert len(codes) == 1 and html.unescape(codes[0]).strip() == shown.strip(), (text, span)
