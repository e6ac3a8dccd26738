"""Trace-supplied strings reach the terminal and markdown verbatim but inert: no rich markup, no ANSI, no links.

The reproducer is a trace whose kernel names, GPU name and file name carry rich markup (``[/]`` crashed rich
with MarkupError; ``[link=...]`` made a clickable file:// link), ANSI escapes, a bidi override and a real
demangled C++ name with ``[with T = float]``, which must print exactly as written.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from phaseprof.commands.main import main
from phaseprof.safe_text import markdown, plain, terminal

CPP = "void axpy<float>(int, float, float const*, float*) [with T = float]"
HOSTILE = ["[/]", "[link=file:///etc/passwd]click[/link]", "\x1b[2J\x1b]8;;file:///etc\x07x\x1b]8;;\x07",
           "evil\u202egnp.exe", CPP]
GPU = "![x](http://127.0.0.1:9/track.png) [bold]H200[/]\x1b[31m"


def _trace(path: Path, names: list[str]) -> Path:
    events = []
    for i, name in enumerate(names):
        t = 100 + 50 * i
        events += [
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t, "dur": 5,
             "args": {"correlation": i + 1}},
            {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": t + 10, "dur": 20,
             "args": {"correlation": i + 1, "device": 0, "stream": 7}},
        ]
    path.write_text(json.dumps({"traceEvents": events, "deviceProperties": [{"id": 0, "name": GPU}]}))
    return path


@pytest.fixture
def hostile_trace(tmp_path: Path) -> Path:
    d = tmp_path / "dir [bold] \x1b[31m"
    d.mkdir()
    return _trace(d / "t[bold].json", HOSTILE)


def test_table_output_is_verbatim_and_inert(hostile_trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(hostile_trace), "--full-names"]) == 0
    out, err = capsys.readouterr()
    text = " ".join(out.split())  # tables wrap long cells; compare with whitespace folded
    assert "\x1b" not in out + err and "\u202e" not in out
    assert "[with T = float]" in text and "[/]" in text and "[link=file:///etc/passwd]click[/link]" in text
    assert "[bold]H200[/]" in text  # the GPU name, markup shown as text


def test_short_names_stay_inert(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Short names are cut from what the reader sees: a cut never drops the escape of a ``[`` it keeps (a long
    name ending in markup printed it live, or crashed rich on ``[/]``)."""
    long_tail = "k" * 80 + "[/]" + "[bold]x[/bold]"
    assert main(["analyze", str(_trace(tmp_path / "t.json", [*HOSTILE, long_tail]))]) == 0
    out, err = capsys.readouterr()
    text = " ".join(out.split())
    assert "\x1b" not in out + err and "\u202e" not in out
    assert "axpy‹…›" in text  # the C++ name, short
    assert "k‹…›][bold]x[/bold]" in text  # the long name's head and tail around the cut, markup as text


def test_markdown_output_has_no_control_and_no_live_image(hostile_trace: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(hostile_trace), "-f", "markdown"]) == 0
    out = capsys.readouterr().out
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f\u202e]", out)
    assert "](http" not in out.replace("\\](http", "")  # the image syntax is escaped: \!\[x\]\(http...
    assert "[with T = float]" in out  # kernel names in code spans stay verbatim


def test_diff_of_hostile_traces(tmp_path: Path, hostile_trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = _trace(tmp_path / "b[link=x].json", HOSTILE[::-1])
    for fmt in ("table", "markdown"):
        assert main(["diff", str(hostile_trace), str(other), "-f", fmt]) == 0
        out, err = capsys.readouterr()
        assert "\x1b" not in out + err and "Traceback" not in out + err


def test_error_line_is_inert(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "x[red]\x1b[31m.json"
    p.write_text("not json")
    assert main(["analyze", str(p)]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "x[red]" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("text", HOSTILE + [GPU])
def test_helpers(text: str) -> None:
    from rich.console import Console
    from rich.text import Text

    shown = Console().render_str(terminal(text))  # would raise MarkupError unescaped
    assert isinstance(shown, Text) and shown.plain == plain(text)
    assert plain(text).isprintable()
    assert "![" not in markdown(text) and "<" not in markdown(text).replace("\\<", "")
