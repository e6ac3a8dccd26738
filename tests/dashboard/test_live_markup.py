"""No string from a trace, a breakdown or a run record becomes live in the page.

Every page runs on a runs directory in which every such string is hostile (``hostile_runs``), and the test walks
*everything the page sent* (every element and block of the AppTest tree, every string field of its message), not
a list of known calls: a plotly figure's strings must carry no tag but the builders' own ``<br>`` and
``<extra></extra>``; a markdown string must render (CommonMark, plus GFM's autolink rule) with no link, image,
emphasis, code span, raw HTML, LaTeX or directive made by the payload.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from markdown_it import MarkdownIt

from phaseprof.safe_text import WORD_JOINER, page_markdown, plotly_figure, plotly_text, unlinked

from . import hostile_runs as H
from .conftest import ok

#: Message fields Streamlit shows as plain text (never markdown): widget values, code blocks, element ids and
#: keys, file names, and data (tables travel as Arrow bytes). Options are plain only in a selectbox and a
#: multiselect (a radio's options are markdown).
PLAIN_OPTIONS = frozenset({"Selectbox", "MultiSelect"})
PLAIN_FIELDS = frozenset({"default", "value", "values", "raw_value", "code_text", "id", "form_id",
                          "key", "placeholder", "file_name", "url", "data", "formatted_value", "format",
                          "type", "language", "icon", "theme", "selection_mode", "column_order", "columns",
                          "raw_values", "set_value", "column_config"})
#: GFM's literal autolinks as remark-gfm (Streamlit's markdown) finds them in parsed text
#: (mdast-util-gfm-autolink-literal: ``(https?://|www(?=\.))([-.\w]+)``, ``([-.\w+]+)@([-\w]+(?:\.[-\w]+)+)``).
GFM_AUTOLINK = re.compile(r"(?i)(?:https?://|www(?=\.))[-.\w]+|[-.\w+]+@[-\w]+(?:\.[-\w]+)+")
#: The only tags a figure may carry (the dashboard's own templates write them).
OWN_TAGS = re.compile(r"<br>|<extra>|</extra>")
_render = MarkdownIt("commonmark").enable("table").enable("strikethrough").render


@pytest.fixture(scope="module")
def hostile_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return H.build(tmp_path_factory.mktemp("hostile"))


# ------------------------------------------------------------------------------------------------ escapers
@pytest.mark.parametrize("text", [H.PAYLOAD, "see http://x.example/a, HTTPS://y www.z.example a.b+c@d.example",
                                  "mailto:a@b.example xmpp:c@d.example ftp://e.example"])
def test_page_markdown_renders_as_its_text_with_no_element(text):
    out = _render(page_markdown(text))
    body = re.sub(r"^<p>|</p>\n$", "", out)
    assert "<" not in body.replace("&lt;", ""), out  # no element at all: only escaped text
    assert html.unescape(body).replace(WORD_JOINER, "") == text  # reads as written
    assert not GFM_AUTOLINK.search(html.unescape(body)), body


def test_unlinked_breaks_exactly_the_autolink_triggers():
    assert unlinked("http://a www.b c@d at::native 1.5") == "http\u2060://a www\u2060.b c@\u2060d at::native 1.5"
    assert not GFM_AUTOLINK.search(unlinked("HTTPS://A.B WWW.C.D e.f+g@h.i"))


def test_plotly_text_and_the_figure_net():
    assert plotly_text('<a href="h">x</a> & <br>') == '&lt;a href="h"&gt;x&lt;/a&gt; &amp; &lt;br&gt;'
    spec = {"data": [{"type": "bar", "x": ["<b>k</b>", plotly_text("<i>j</i>")], "hovertemplate": "%{x}<br>"
                      "<extra></extra>", "name": "<span style='x'>n</span>"}],
            "layout": {"title": {"text": "<a href='h'>t</a><BR>"}, "template": {"layout": {"font": {"family": "<x>"}}}}}
    out = plotly_figure(spec)
    assert out["data"][0]["x"] == ["&lt;b>k&lt;/b>", plotly_text("<i>j</i>")]  # escaped ones unchanged
    assert out["data"][0]["hovertemplate"] == "%{x}<br><extra></extra>"
    assert out["data"][0]["name"] == "&lt;span style='x'>n&lt;/span>"
    assert out["layout"]["title"]["text"] == "&lt;a href='h'>t&lt;/a>&lt;BR>"
    assert out["layout"]["template"] == spec["layout"]["template"]  # plotly's own, kept


# ------------------------------------------------------------------------------------ everything a page sent
def _nodes(node: Any) -> Iterator[Any]:
    yield node
    children = getattr(node, "children", None)
    for child in (children.values() if isinstance(children, dict) else children or ()):
        yield from _nodes(child)


def _strings(msg: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """(field path, string) for every string field of a protobuf message, nested messages included."""
    for field, value in msg.ListFields():
        repeated = field.is_repeated if hasattr(field, "is_repeated") else field.label == field.LABEL_REPEATED
        values = value if repeated else [value]
        for v in values:
            name = f"{path}.{field.name}"
            if isinstance(v, str):
                yield name, v
            elif hasattr(v, "ListFields"):
                yield from _strings(v, name)


def _figure_strings(v: Any, key: str = "") -> Iterator[tuple[str, str]]:
    if isinstance(v, str):
        yield key, v
    elif isinstance(v, dict):
        for k, x in v.items():
            if k != "template":  # plotly's own theme
                yield from _figure_strings(x, k)
    elif isinstance(v, list):
        for x in v:
            yield from _figure_strings(x, key)


def _check_figure(spec: str, where: str) -> int:
    """Assert no payload tag in a figure; returns how many of its strings carried the payload."""
    fig = json.loads(spec)
    seen = 0
    for key, s in _figure_strings(fig):
        assert "<" not in OWN_TAGS.sub("", s), (where, key, s[:300])
        seen += "PAYBOLD" in s
    return seen


def _check_markdown(s: str, where: str) -> None:
    out = _render(s)
    assert "<a " not in out and "<img" not in out, (where, s[:300])
    for tag in ("strong", "em", "code", "del"):
        for inner in re.findall(rf"<{tag}>(.*?)</{tag}>", out, flags=re.S):
            assert not any(m in inner and len(inner) < 40 for m in H.MARKERS), (where, tag, inner)  # made by it
    text = html.unescape(re.sub(r"<[^>]+>", "", re.sub(r"<code>.*?</code>", "", out, flags=re.S)))
    assert not GFM_AUTOLINK.search(text), (where, GFM_AUTOLINK.search(text).group(), s[:300])
    unescaped = re.sub(r"(`+).+?\1", "", s)  # a code span shows its text as it is
    assert not re.search(r"(?<!\\)\$PAYTEX|(?<!\\):red\\?\[|(?<!\\)<(?:b|i|span|a|img|BR)\b", unescaped), (
        where, s[:300])


def _walk(at: Any, page: str) -> tuple[int, int]:
    """Check every figure and every markdown string the page sent; returns how many carried the payload."""
    figures = texts = 0
    for node in _nodes(at._tree):
        proto = getattr(node, "proto", None)
        if proto is None or not hasattr(proto, "ListFields"):
            continue
        kind = type(proto).__name__
        for path, s in _strings(proto):
            where = (page, kind, path)
            field = path.rsplit(".", 1)[-1]
            if kind == "PlotlyChart" and path == ".spec":
                figures += _check_figure(s, str(where))
            elif field not in PLAIN_FIELDS and not (field == "options" and kind in PLAIN_OPTIONS):
                _check_markdown(s, str(where))
                texts += any(m in s for m in H.MARKERS)
    return figures, texts


#: Page -> the query and session state that put the hostile runs on it, and whether its figures and markdown
#: must show the payload (so the walk is known to have met it).
PAGES = {
    "Runs": ({}, {}, False, False),  # names only in the table and the pickers (plain text)
    "Breakdown": ({}, {"current_run": H.RUN_A}, True, True),
    "Timeline": ({}, {"current_run": H.TRACE}, True, True),
    "Compare": ({"a": H.RUN_A, "b": H.RUN_B}, {}, True, True),
    "Sweep": ({}, {}, True, True),
    "PD": ({}, {}, True, True),  # the hostile PD run: its picker, summary, charts and both sides
    "Memory": ({}, {}, False, False),
    "Ranks": ({}, {}, False, False),
}


@pytest.mark.parametrize("page", list(PAGES))
def test_no_payload_becomes_live_on_any_page(make_app, hostile_dir, page):
    query, state, in_figures, in_text = PAGES[page]
    at = make_app(page, runs=hostile_dir, **query)
    for k, v in state.items():
        at.session_state[k] = v
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    figures, texts = _walk(at, page)
    assert not in_figures or figures, f"{page}: no figure showed the payload (the walk met nothing)"
    assert not in_text or texts, f"{page}: no markdown showed the payload"


def test_breakdown_every_section_on_the_hostile_run(make_app, hostile_dir):
    """The Breakdown's figures are the issue's reproducer: per-step chart, per-layer heat map, roofline."""
    at = make_app("Breakdown", runs=hostile_dir)
    at.session_state["current_run"] = H.RUN_A
    ok(at.run())
    keys = [getattr(c.proto, "id", "") for c in at.get("plotly_chart")]
    for key in ("phase_buckets", "layer_heatmap", "roofline"):
        assert any(key in k for k in keys), (key, keys)
    # The per-step chart: drawn for a phase of several steps (the decode run; RUN_A's prefill is one step).
    from phaseprof.report.json_io import load_breakdown

    phases = load_breakdown(hostile_dir / H.RUN_B / "breakdown.json").phases
    at = make_app("Breakdown", runs=hostile_dir)
    at.session_state["current_run"] = H.RUN_B
    at.session_state["bd_phase"] = max(phases, key=lambda p: p.steps).phase
    ok(at.run())
    assert any("per_step" in getattr(c.proto, "id", "") for c in at.get("plotly_chart"))
    figures, _ = _walk(at, "Breakdown")
    assert figures
