"""Every renderer gets the same hostile strings, from every kind of outside input (a trace, a PD run
directory, a sweep record, a measured ceilings file), and shows them inert.

One string (``HOSTILE``) carries terminal control (ANSI CSI, an OSC 8 hyperlink, BEL, a C1 CSI, NUL), a
right-to-left override, rich markup, markdown and HTML that would be live in a PR comment. It goes into every
string field of each input that a view shows. Each view is then checked by what it is:

- terminal: no control character reaches the screen; rich markup prints as text (``[link=...]`` stays visible);
- markdown: rendered by markdown-it (CommonMark + tables), no element the input made (no image, link, raw HTML;
  a fenced ``pre`` block is phaseprof's own), and no control character;
- JSON: valid, and its text holds no raw control character (the encoder escapes them; a key too).

A view added later joins ``VIEWS`` (the dashboard's pages have their own hostile suite, tests/dashboard).
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from phaseprof.commands.main import main
from tests.hostile.test_escaping import _trace
from tests.hostile.test_markdown_injection import _details_ok, _live

from ..conftest import REPO

HOSTILE = ("\x1b[31mRED\x1b[0m \x1b]8;;file:///etc/passwd\x07OSC\x1b]8;;\x07 \x00NUL \x07 \x9b2J \u202eRTL "
           "[link=file:///etc/passwd]PAYRICH[/link] [/] ![PAYIMAGE](http://127.0.0.1:9/i.png) "
           "<img src=x onerror=alert(1)> [PAYLINK](http://127.0.0.1:9/l) ``` <b>PAYBOLD</b> | cell |")
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
PD = REPO / "traces/h200/pd/qwen3.5-35b-a3b-fp8-eager-4096in-32out"
SWEEP = REPO / "traces/h200/serving/bf16/decode/sweep.json"
MEASURED = REPO / "traces/h200/ceilings/h200-measured.json"


def _edit(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def _traces(tmp: Path) -> list[str]:
    names = [HOSTILE, f"{HOSTILE} gemm", "void k<float>() [with T = float]"]
    return [str(_trace(tmp / "a.json", names)), str(_trace(tmp / "b.json", names[::-1]))]


def _pd_run(tmp: Path) -> str:
    run = tmp / "pd"
    shutil.copytree(PD, run)

    def change(h: dict[str, Any]) -> None:
        for key in ("connector", "model", "prefill_url", "decode_url"):
            h[key] = f"{HOSTILE} {h[key]}"
        h["modelled"]["link"] = HOSTILE
        h["notes"] = [HOSTILE]

    _edit(run / "handoff.json", change)
    return str(run)


def _sweep(tmp: Path) -> str:
    d = tmp / "sweep"
    d.mkdir()
    shutil.copy(SWEEP, d / "sweep.json")

    def change(doc: dict[str, Any]) -> None:
        doc["model"]["name"] = HOSTILE
        doc["device"]["name"] = HOSTILE
        doc["engine"]["mode"] = HOSTILE
        doc["engine"]["kwargs"][HOSTILE] = HOSTILE  # a key from outside, too

    _edit(d / "sweep.json", change)
    return str(d)


def _measured(tmp: Path) -> str:
    f = tmp / "measured.json"
    shutil.copy(MEASURED, f)
    _edit(f, lambda doc: doc.update(gpu_name=HOSTILE, measured_at=HOSTILE))
    return str(f)


#: name -> (format, the command line given a scratch directory)
VIEWS: dict[str, tuple[str, Callable[[Path], list[str]]]] = {
    "analyze table": ("terminal", lambda t: ["analyze", _traces(t)[0], "--full-names"]),
    "analyze markdown": ("markdown", lambda t: ["analyze", _traces(t)[0], "-f", "markdown"]),
    "analyze json": ("json", lambda t: ["analyze", _traces(t)[0], "-f", "json"]),
    "diff table": ("terminal", lambda t: ["diff", *_traces(t)]),
    "diff markdown": ("markdown", lambda t: ["diff", *_traces(t), "-f", "markdown"]),
    "analyze PD table": ("terminal", lambda t: ["analyze", _pd_run(t)]),
    "analyze PD markdown": ("markdown", lambda t: ["analyze", _pd_run(t), "-f", "markdown"]),
    "analyze PD json": ("json", lambda t: ["analyze", _pd_run(t), "-f", "json"]),
    "pareto table": ("terminal", lambda t: ["pareto", _sweep(t)]),
    "pareto markdown": ("markdown", lambda t: ["pareto", _sweep(t), "--format", "markdown"]),
    "pareto json": ("json", lambda t: ["pareto", _sweep(t), "--format", "json"]),
    "pareto with hostile ceilings": ("terminal", lambda t: ["pareto", _sweep(t), "--ceilings", _measured(t)]),
    "sweep --show": ("terminal", lambda t: ["sweep", "--show", _sweep(t)]),
    "ceilings --show": ("terminal", lambda t: ["ceilings", "--show", "--measured", _measured(t)]),
}


@pytest.mark.parametrize("name", list(VIEWS))
def test_every_view_shows_hostile_strings_inert(name: str, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    kind, argv = VIEWS[name]
    code = main(argv(tmp_path))
    out, err = capsys.readouterr()
    assert code == 0, err
    assert not CONTROL.search(out + err), (name, CONTROL.search(out + err))
    if kind == "terminal":  # where the view shows the string, its markup shows as text
        assert "[link=file:///etc/passwd]" in "".join(out.split()) or "PAYRICH" not in out
    elif kind == "markdown":  # phaseprof's own: its headings and fenced blocks
        assert [t for t in _live(_details_ok(out)) if t not in ("pre", "h2")] == [], name
    else:
        json.loads(out)


def test_a_sweeps_plot_html_is_inert(tmp_path: Path) -> None:
    """A sweep's ``plot.html`` (plotly) titles the plot with the model's name as the server reported it: plotly
    reads ``<a href>``, ``<b>``, ``<span style>`` in it as markup, so no payload tag reaches the figure."""
    pytest.importorskip("plotly")  # an extra: without it no plot.html is written
    from phaseprof.capture.shared.sweep import write_plot

    spec = {"data": [{"type": "scatter", "x": [1], "y": [2], "name": HOSTILE}],
            "layout": {"title": {"text": f"Decode TPOT — {HOSTILE}"}}}
    assert write_plot(spec, tmp_path) == ["plot.json", "plot.html"]
    figure = json.loads((tmp_path / "plot.json").read_text())
    shown = json.dumps(figure)
    assert "<img" not in shown and "<b>PAYBOLD" not in shown and "\\u001b" not in shown
    html = (tmp_path / "plot.html").read_text()
    assert "<img src=x" not in html and "<b>PAYBOLD" not in html and not CONTROL.search(html)
