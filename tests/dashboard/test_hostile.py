"""Hostile input against the dashboard: links leading out of the runs directory, markdown in names
a trace or the disk supplies, huge upload names, NUL in typed paths; and the Compare page's model naming."""

from __future__ import annotations

import gzip
import json
import re
import shutil
from pathlib import Path

import pytest

from phaseprof.analysis.pipeline import analyze_trace
from phaseprof.dashboard.sources import Roots, save_upload, scan
from phaseprof.dashboard.text import code, md, md_frame
from phaseprof.errors import PhaseprofError
from phaseprof.report.json_io import write_breakdown
from tests.conftest import PUBLIC_CUT_DIR, REPO

from .conftest import B200_PREFILL, H100_DECODE, ok, shown

#: A GPU name that is a markdown image: rendered, the browser would fetch the URL.
EVIL_GPU = "![x](http://127.0.0.1:9/track.png)"
#: A file name that is a markdown image too (a relative URL: the dashboard's own server would be asked).
EVIL_FILE = "![y](track.png) $x$ :red[z].json.gz"
H200_RUNS = REPO / "traces" / "h200"
H200_DECODE_RUNS = {"graph": "graph/20261130T094743Z-h200-qwen3.5-35b-a3b-decode-128in-32out",
                    "eager": "eager/20261130T094747Z-h200-qwen3.5-35b-a3b-decode-128in-32out"}


def with_gpu_name(src: Path, dest: Path, name: str) -> Path:
    """The real trace ``src`` with its recorded GPU name replaced by ``name`` (a hostile mutation)."""
    doc = json.loads(gzip.decompress(src.read_bytes()))
    for d in doc["deviceProperties"]:
        d["name"] = name
    dest.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return dest


def _all_markdown(at) -> list[str]:
    """Every markdown string the page sent (text, captions, headings, alert boxes, expander labels)."""
    out = [e.value for kind in ("markdown", "caption", "subheader", "title", "error", "warning", "info", "success")
           for e in getattr(at, kind)]
    return out + [e.label for e in at.expander] + [m.value for m in at.metric]


# ------------------------------------------------------------------------------------------------ escaping
def test_md_makes_markdown_literal_and_code_cannot_be_broken_out_of():
    from markdown_it import MarkdownIt

    render = MarkdownIt("commonmark").enable("table").render
    for evil in (EVIL_GPU, "[link](javascript:alert(1))", "<img src=x onerror=alert(1)>", "**b** _i_ `c`",
                 "# head\n- list", "a\x00b\x1b[31mred"):
        html = render(md(evil))
        assert "<img" not in html and "<a " not in html and "<strong>" not in html and "<h1>" not in html, html
        assert "<code>" not in html
        assert "\n" not in md(evil) and "\x00" not in md(evil) and "\x1b" not in md(evil)
    for evil in ("a`b", "``", "` x `", EVIL_GPU):
        html = render(code(evil))
        assert html.count("<code>") == 1 and "<img" not in html, html
    df = md_frame(__import__("pandas").DataFrame({"q": [EVIL_GPU], "n": [1]}))
    assert df["q"][0] == md(EVIL_GPU) and df["n"][0] == 1


def test_trace_supplied_names_reach_the_page_escaped(make_app, tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    with_gpu_name(PUBLIC_CUT_DIR / H100_DECODE, runs / EVIL_FILE, EVIL_GPU)
    shutil.copy(PUBLIC_CUT_DIR / B200_PREFILL, runs / B200_PREFILL)
    assert analyze_trace(runs / EVIL_FILE).trace.gpu_name == EVIL_GPU
    for page, query in (("Breakdown", {}), ("Timeline", {}), ("Compare", {"a": EVIL_FILE, "b": B200_PREFILL})):
        at = make_app(page, runs=runs, **query)
        at.session_state["current_run"] = EVIL_FILE
        ok(at.run())
        texts = _all_markdown(at)
        assert any(EVIL_GPU in shown(t) for t in texts), page  # shown, as text
        assert any(EVIL_FILE in shown(t) for t in texts), page
        for t in texts:
            bare = re.sub(r"(`+).+?\1", "", t)  # code spans show their text as it is
            assert "![" not in bare and "](" not in bare and "$x$" not in bare and ":red[" not in bare, (page, t)


# ------------------------------------------------------------------------------------------ links leading out
def _run_dir(runs: Path, name: str) -> Path:
    d = runs / name
    d.mkdir(parents=True)
    shutil.copy(PUBLIC_CUT_DIR / H100_DECODE, d / "trace.json.gz")
    return d


def test_files_linked_out_of_a_run_directory_are_not_read(make_app, tmp_path):
    runs, outside = tmp_path / "runs", tmp_path / "outside"
    outside.mkdir()
    write_breakdown(analyze_trace(PUBLIC_CUT_DIR / B200_PREFILL), outside / "breakdown.json")
    (outside / "run.json").write_text(json.dumps({"model": {"name": "secret-model"}}))
    d = _run_dir(runs, "linked")
    (d / "breakdown.json").symlink_to(outside / "breakdown.json")
    (d / "run.json").symlink_to(outside / "run.json")
    only = runs / "only-links"
    only.mkdir()
    (only / "breakdown.json").symlink_to(outside / "breakdown.json")
    loose = runs / "loose"
    loose.mkdir()
    shutil.copy(PUBLIC_CUT_DIR / B200_PREFILL, loose / "b.json.gz")
    (outside / "MANIFEST.tsv").write_text("file\twhat\nb.json.gz\tsecret description\n")
    (loose / "MANIFEST.tsv").symlink_to(outside / "MANIFEST.tsv")
    sources = {s.key: s for s in scan(runs.resolve())[0]}
    assert sources["loose/b.json.gz"].description == ""  # the linked MANIFEST.tsv is not read
    assert sources["linked"].trace is not None
    assert sources["linked"].breakdown is None and sources["linked"].run_json is None
    at = make_app("Breakdown", runs=runs)
    at.session_state["current_run"] = "linked"
    ok(at.run())
    text = shown(" ".join(_all_markdown(at)))
    assert "NVIDIA H100 80GB HBM3" in text and "NVIDIA B200" not in text  # the trace inside, not the link
    assert all("secret-model" not in str(m.value) for m in at.metric)
    at = make_app("Breakdown", runs=runs)
    at.session_state["current_run"] = "only-links"
    at.run()
    assert not at.exception
    assert [shown(e.value) for e in at.error] == [
        f"{runs.resolve() / 'only-links'}: no trace, breakdown.json or run.json inside the runs directory here "
        "(links leading outside it are not followed)"]


def test_the_reader_refuses_a_link_even_when_the_listing_had_a_file(tmp_path):
    """A file swapped for a link after the directory was listed: the read itself checks the resolved file."""
    from phaseprof.dashboard import data

    runs, outside = tmp_path / "runs", tmp_path / "outside"
    outside.mkdir()
    d = _run_dir(runs, "r")
    write_breakdown(analyze_trace(d / "trace.json.gz"), d / "breakdown.json")
    roots = Roots(runs_dir=runs.resolve(), upload_dir=(tmp_path / "up").resolve())
    (src,) = scan(roots.runs_dir)[0]
    shutil.move(d / "breakdown.json", outside / "breakdown.json")
    (d / "breakdown.json").symlink_to(outside / "breakdown.json")
    with pytest.raises(PhaseprofError, match="outside the runs directory"):
        data.breakdown(src, roots)


def test_memory_page_refuses_a_config_or_run_file_linked_out(tmp_path):
    from phaseprof.dashboard.views import memory
    from phaseprof.memory.plan import MemoryInputs

    runs, outside = tmp_path / "runs", tmp_path / "outside"
    roots = Roots(runs_dir=runs, upload_dir=tmp_path / "up")
    (runs / "model").mkdir(parents=True)
    (runs / "run").mkdir()
    outside.mkdir()
    (outside / "config.json").write_text("{}")
    (outside / "run.json").write_text("{}")
    (runs / "model" / "config.json").symlink_to(outside / "config.json")
    (runs / "run" / "run.json").symlink_to(outside / "run.json")
    with pytest.raises(PhaseprofError, match="outside the runs directory"):
        memory._guarded(MemoryInputs(model="model", gpu="H200"), roots)
    with pytest.raises(PhaseprofError, match="outside the runs directory"):
        memory._guarded(MemoryInputs(model="qwen3.5-35b-a3b", gpu="H200", run_dir="run"), roots)


# ----------------------------------------------------------------------------------- the Runs page's inputs
def test_a_file_added_by_path_becomes_the_current_run(make_app, runs_dir, tmp_path):
    runs = tmp_path / "runs"
    (runs / ".hidden").mkdir(parents=True)  # not listed by the scan: only "Add path" brings it in
    shutil.copy(PUBLIC_CUT_DIR / B200_PREFILL, runs / ".hidden" / "x.json.gz")
    shutil.copy(PUBLIC_CUT_DIR / H100_DECODE, runs / H100_DECODE)
    at = ok(make_app("Runs", runs=runs).run())
    at.text_input(key="add_path").set_value(".hidden/x.json.gz")
    at.button(key="add_button").click().run()
    ok(at)
    assert at.session_state["current_run"] == ".hidden/x.json.gz"
    assert at.session_state["added_paths"] == [str((runs / ".hidden" / "x.json.gz").resolve())]
    at.sidebar.radio(key="page").set_value("Breakdown").run()
    ok(at)
    text = shown(" ".join(m.value for m in at.markdown))
    assert ".hidden/x.json.gz" in text and "NVIDIA B200" in text


@pytest.mark.parametrize("typed, message", [
    ("runs\x00/x.json", "a path cannot contain control characters (NUL, newline, ...)"),
    ("x" * 5000, "path too long (5,000 characters; at most 4,096)"),
    ("y" * 300 + ".json", None),  # one over-long name: the file system's refusal, as one line
])
def test_bad_typed_paths_give_one_message(make_app, typed, message):
    at = ok(make_app("Runs").run())
    at.text_input(key="add_path").set_value(typed)
    at.button(key="add_button").click().run()
    assert not at.exception
    assert len(at.error) == 1 and "internal error" not in at.error[0].value
    if message:
        assert shown(at.error[0].value) == message
    else:
        assert shown(at.error[0].value).endswith(": no such file or directory")


def test_a_5000_character_upload_name_is_stored_under_a_short_name(make_app, tmp_path):
    at = ok(make_app("Runs").run())
    name = "n" * 5000 + ".json.gz"
    at.file_uploader(key="uploads").set_value((name, (PUBLIC_CUT_DIR / B200_PREFILL).read_bytes(),
                                               "application/gzip")).run()
    ok(at)
    current = at.session_state["current_run"]
    assert current.startswith("upload/") and current.endswith("nnn.json.gz") and len(current) <= 7 + 13 + 120
    assert all(len(c.value) < 300 for c in at.caption)
    at.sidebar.radio(key="page").set_value("Breakdown").run()
    ok(at)
    assert "NVIDIA B200" in shown(" ".join(m.value for m in at.markdown))
    # (The upload box itself refuses other extensions; the store's own message stays short too.)
    with pytest.raises(PhaseprofError, match="expected a .json") as e:
        save_upload("m" * 5000 + ".txt", b"x", tmp_path)
    assert len(str(e.value)) < 300


# ------------------------------------------------------------------------------------------ Compare: model
def test_compare_shows_the_preset_name_and_the_config_path_only_as_detail(make_app, tmp_path):
    runs = tmp_path / "runs"
    for mode, rel in H200_DECODE_RUNS.items():  # real H200 run directories (breakdown + run.json; no trace)
        (runs / mode).mkdir(parents=True)
        for f in ("breakdown.json", "run.json"):
            shutil.copy(H200_RUNS / rel / f, runs / mode / f)
    path = json.loads((runs / "graph" / "run.json").read_text())["model"]["path"]
    assert path.startswith("/") and "phaseprof-presets" in path
    at = ok(make_app("Compare", runs=runs, a="eager", b="graph").run())
    lines = [m.value for m in at.markdown if m.value.startswith(("**A**", "**B**"))]
    assert len(lines) == 2
    for line in lines:
        assert "model: **qwen3.5-35b-a3b**" in shown(line)
        assert f"model config: {code(path)}" in line  # the path, as detail on its own line
        assert path not in line.split("  \n")[0]
    sides = at.dataframe[0].value if "status" in at.dataframe[0].value.columns else None
    assert sides is not None and path not in sides.to_string()


def test_a_side_that_recorded_only_the_config_directory_is_named_by_its_preset():
    from phaseprof.dashboard.views.compare import model_label
    from phaseprof.records import ModelInfo, RunRecord

    d = "/tmp/phaseprof-presets/qwen3.5-35b-a3b-56af00d1e451"
    assert model_label(d, None) == ("qwen3.5-35b-a3b", d)
    rec = RunRecord(model=ModelInfo(name="qwen3.5-35b-a3b", path=d))
    assert model_label("qwen3.5-35b-a3b", rec) == ("qwen3.5-35b-a3b", d)
    assert model_label("/models/my-llama/", None) == ("my-llama", "/models/my-llama/")
    assert model_label("meta-llama/Llama-3.1-8B", None) == ("meta-llama/Llama-3.1-8B", None)  # a repo id
    assert model_label(None, None) == (None, None)


def test_kernel_names_reach_plotly_as_text_not_pseudo_html(runs_dir):
    """Plotly reads labels as pseudo-HTML (``<a href>``, ``<span style>``): names go in with entities, so a
    templated kernel name shows whole and a hostile one draws no tag."""
    import re as _re

    from phaseprof.analysis.pipeline import analyze
    from phaseprof.analysis.timeline import step_timeline
    from phaseprof.classify.rules import load_rules
    from phaseprof.dashboard import charts
    from phaseprof.dashboard.text import plot
    from phaseprof.trace.read import load_tables

    assert plot('void k<float, 8>(a&b) <a href="http://x">') == (
        'void k&lt;float, 8&gt;(a&amp;b) &lt;a href="http://x"&gt;')
    tl = step_timeline(analyze(load_tables(runs_dir / H100_DECODE), ruleset=load_rules()).timeline, step=1)
    templated = [n for n in tl.activities["name"] if "<" in n]
    assert templated  # real CUDA kernel names carry template arguments
    fig = charts.timeline(tl)
    hover = [t for tr in fig.data for t in (tr.hovertext or ())]
    assert all(_re.sub(r"<br>", "", t).count("<") == 0 for t in hover)
    assert any(plot(templated[0]) in t for t in hover)
