"""What the dashboard may read, how it starts, and how it fails: one-line error boxes, never a traceback."""

from __future__ import annotations

import ast
import gzip
import os
import re
import shutil
from pathlib import Path

import pytest

from phaseprof.dashboard.sources import Kind, Roots, guard, resolve_user_path, save_upload, scan
from phaseprof.dashboard.widgets import settings
from phaseprof.commands.dashboard import ADDRESS, app_path, streamlit_command
from phaseprof.errors import PhaseprofError
from tests.conftest import PUBLIC_CUT_DIR, REPO

from .conftest import B200_PREFILL, BROKEN, RUN_NAME, ok, shown


def roots(tmp_path: Path) -> Roots:
    (tmp_path / "runs").mkdir(exist_ok=True)
    (tmp_path / "up").mkdir(exist_ok=True)
    return Roots(runs_dir=(tmp_path / "runs").resolve(), upload_dir=(tmp_path / "up").resolve())


def test_guard_allows_only_the_runs_and_upload_directories(tmp_path):
    r = roots(tmp_path)
    inside = r.runs_dir / "a.json"
    inside.write_text("{}")
    outside = tmp_path / "secret.json"
    outside.write_text("{}")
    (r.runs_dir / "escape.json").symlink_to(outside)
    assert guard(inside, r) == inside
    assert resolve_user_path("a.json", r) == inside
    for bad in (str(outside), "../secret.json", "escape.json", "/etc/passwd"):
        with pytest.raises(PhaseprofError, match="outside the runs directory"):
            resolve_user_path(bad, r)
    with pytest.raises(PhaseprofError, match="no such file"):
        resolve_user_path("missing.json", r)


def test_scan_finds_runs_loose_files_sweeps_and_descriptions(runs_dir, tmp_path):
    sources, sweeps = scan(runs_dir)
    by_key = {s.key: s for s in sources}
    assert by_key[RUN_NAME].kind == Kind.RUN and by_key[RUN_NAME].breakdown is not None
    assert by_key[B200_PREFILL].kind == Kind.TRACE
    assert [p.parent.name for p in sweeps] == ["sweep-decode", "sweep-prefill"]
    assert not any(s.key.endswith("plot.json") for s in sources)
    # A MANIFEST.tsv beside traces describes them; a symlink leading outside is not listed.
    d = tmp_path / "described"
    d.mkdir()
    shutil.copy(PUBLIC_CUT_DIR / B200_PREFILL, d / "x.json.gz")
    (d / "MANIFEST.tsv").write_text("file\twhat\nx.json.gz\tgpt-oss-120b on B200\n")
    (d / "link.json.gz").symlink_to(PUBLIC_CUT_DIR / B200_PREFILL)
    (only,) = scan(d)[0]
    assert (only.key, only.description) == ("x.json.gz", "gpt-oss-120b on B200")


def test_uploads_are_stored_by_content_hash_with_a_safe_name(tmp_path):
    r = roots(tmp_path)
    p = save_upload("../../evil name.json", b"{}", r.upload_dir)
    assert p.parent == r.upload_dir and re.fullmatch(r"[0-9a-f]{12}-evil_name\.json", p.name)
    with pytest.raises(PhaseprofError, match="expected a .json"):
        save_upload("notes.txt", b"x", r.upload_dir)


def test_settings_from_arguments_then_environment():
    assert settings(["--runs-dir", "/x", "--max-upload-mb", "7"], {}) == (Path("/x"), 7)
    assert settings([], {"PHASEPROF_RUNS_DIR": "/y", "PHASEPROF_MAX_UPLOAD_MB": "9"}) == (Path("/y"), 9)
    assert settings(["-q"], {})[1] == 512


def test_the_server_binds_localhost_and_caps_uploads():
    cmd = streamlit_command(app=app_path(), runs_dir=Path("/r"), port=8600, max_upload_mb=64)
    assert ADDRESS == "127.0.0.1"
    assert cmd[cmd.index("--server.address") + 1] == "127.0.0.1"
    assert cmd[cmd.index("--server.maxUploadSize") + 1] == "64"
    assert cmd[cmd.index("--client.showErrorDetails") + 1] == "none"
    assert cmd[cmd.index("--") + 1:] == ["--runs-dir", "/r", "--max-upload-mb", "64"]
    assert app_path() == REPO / "phaseprof" / "dashboard" / "app.py"


def test_cli_rejects_a_missing_runs_directory(tmp_path, capsys):
    from phaseprof.commands.main import main

    assert main(["dashboard", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert "runs directory does not exist" in err and len(err.strip().splitlines()) == 1


def test_docs_screenshots_stay_small_and_are_all_shown():
    pngs = sorted((REPO / "docs" / "img").glob("*.png"))
    for png in pngs:
        assert png.stat().st_size <= 250_000, png
    shown = set(re.findall(r"\(img/([^)]+\.png)\)", (REPO / "docs" / "dashboard.md").read_text()))
    assert shown == {p.name for p in pngs}  # each one in docs/dashboard.md, none missing


def test_no_pickle_and_no_eval_in_dashboard_code():
    files = [REPO / "dashboards" / "app.py", *(REPO / "phaseprof" / "dashboard").rglob("*.py"),
             REPO / "phaseprof" / "analysis" / "timeline.py"]
    for f in files:
        text = f.read_text()
        assert not re.search(r"^\s*(import|from)\s+(pickle|cloudpickle|dill|joblib)\b", text, re.M), f
        assert not re.search(r"\b(eval|exec)\(", text), f


# ---------------------------------------------------------------------------------- in the running app
def test_a_bad_trace_shows_its_one_line_error(make_app, runs_dir):
    from phaseprof.analysis.pipeline import analyze_trace

    with pytest.raises(PhaseprofError) as e:
        analyze_trace(runs_dir / BROKEN)
    at = make_app("Breakdown")
    at.session_state["current_run"] = BROKEN
    at.run()
    assert not at.exception
    assert [shown(x.value) for x in at.error] == [str(e.value)]
    at.sidebar.radio(key="page").set_value("Timeline").run()  # the page stays alive on the next one too
    assert not at.exception and [shown(x.value) for x in at.error] == [str(e.value)]


def test_adding_a_path_outside_the_runs_directory_is_refused(make_app, tmp_path):
    at = ok(make_app("Runs").run())
    at.text_input(key="add_path").set_value("/etc/hostname")
    at.button(key="add_button").click().run()
    assert not at.exception
    assert len(at.error) == 1 and "outside the runs directory" in at.error[0].value
    at.text_input(key="add_path").set_value(B200_PREFILL)
    at.button(key="add_button").click().run()
    assert not at.error and at.session_state["current_run"] == B200_PREFILL


def test_uploading_a_trace_makes_it_the_current_run(make_app, runs_dir):
    at = ok(make_app("Runs").run())
    data = (PUBLIC_CUT_DIR / B200_PREFILL).read_bytes()
    at.file_uploader(key="uploads").set_value(("my trace.json.gz", data, "application/gzip")).run()
    ok(at)
    current = at.session_state["current_run"]
    assert current.startswith("upload/") and current.endswith("-my_trace.json.gz")
    at.sidebar.radio(key="page").set_value("Breakdown").run()
    ok(at)
    assert "NVIDIA B200" in shown(" ".join(m.value for m in at.markdown))


def test_uploads_over_the_cap_and_garbage_are_refused(make_app):
    at = ok(make_app("Runs").run())  # cap set to 5 MB by the fixture
    at.file_uploader(key="uploads").set_value([("big.json", b" " * (6 * 1024 * 1024), "application/json"),
                                               ("junk.json.gz", gzip.compress(b"not json"), "application/gzip")])
    at.run()
    assert not at.exception
    assert [shown(e.value) for e in at.error] == ["big.json: 6 MB is over the 5 MB upload cap"]
    assert at.session_state["current_run"].endswith("-junk.json.gz")  # the junk upload is now current
    at.sidebar.radio(key="page").set_value("Breakdown").run()
    assert not at.exception and len(at.error) == 1
    assert shown(at.error[0].value).endswith("-junk.json.gz: not a JSON trace (expected an object with traceEvents)")


def test_a_missing_runs_directory_is_an_error_box(make_app, tmp_path):
    at = make_app("Runs", runs=tmp_path / "gone").run()
    assert not at.exception
    assert [shown(e.value) for e in at.error] == [f"{tmp_path / 'gone'}: runs directory does not exist"]
    assert os.environ["PHASEPROF_RUNS_DIR"] == str(tmp_path / "gone")


def test_memory_page_refuses_paths_outside_the_runs_dir(tmp_path):
    """The Memory page's free-text config/run directory inputs obey the same rule as every other page."""
    from phaseprof.dashboard.sources import Roots
    from phaseprof.dashboard.views import memory
    from phaseprof.errors import PhaseprofError
    from phaseprof.memory.plan import MemoryInputs

    roots = Roots(runs_dir=tmp_path / "runs", upload_dir=tmp_path / "uploads")
    roots.runs_dir.mkdir()
    roots.upload_dir.mkdir()
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    with pytest.raises(PhaseprofError, match="outside the runs directory"):
        memory._guarded(MemoryInputs(model="qwen3.5-35b-a3b", gpu="H200", run_dir=str(outside)), roots)
    with pytest.raises(PhaseprofError, match="outside the runs directory"):
        memory._guarded(MemoryInputs(model=str(outside), gpu="H200"), roots)
    inside = roots.runs_dir / "r1"
    inside.mkdir()
    ok = memory._guarded(MemoryInputs(model="qwen3.5-35b-a3b", gpu="H200", run_dir="r1"), roots)
    assert ok.run_dir == str(inside.resolve()) and ok.model == "qwen3.5-35b-a3b"


def test_the_checkout_entry_only_calls_the_packaged_app(runs_dir, tmp_path, monkeypatch):
    """``streamlit run dashboards/app.py`` (a checkout) runs the same app as ``phaseprof dashboard``."""
    from streamlit.testing.v1 import AppTest

    entry = REPO / "dashboards" / "app.py"
    body = ast.parse(entry.read_text()).body[1:]  # after the docstring
    assert [ast.unparse(n) for n in body] == ["from phaseprof.dashboard.app import main", "main()"]
    monkeypatch.setenv("PHASEPROF_RUNS_DIR", str(runs_dir))
    monkeypatch.setenv("PHASEPROF_UPLOAD_DIR", str(tmp_path / "up"))
    at = ok(AppTest.from_file(str(entry), default_timeout=120).run())
    assert at.title[0].value == "Runs" and at.sidebar.radio(key="page").options == [
        "Runs", "Breakdown", "Timeline", "Compare", "Sweep", "Pareto", "PD", "Ranks", "Memory"]


def test_runs_page_lists_only_traces_and_breakdowns_among_loose_json(tmp_path):
    """A capture folder's other JSON files (startup facts, summaries, timing, results, a ceilings file) are no
    input to analyse: listing them as traces gave a wall of errors."""
    h200 = REPO / "traces" / "h200"
    eager = h200 / "eager"
    for f in (eager / "startup.json", eager / "summary.json", eager / "timing-benchmark.json",
              h200 / "own-eager" / "result.json", h200 / "ceilings" / "h200-measured.json"):
        shutil.copy(f, tmp_path / f"{f.parent.name}-{f.name}")
    shutil.copy(h200 / "hooks" / "graph-prefill-4096" / "breakdown.json", tmp_path / "a.breakdown.json")
    shutil.copy(PUBLIC_CUT_DIR / B200_PREFILL, tmp_path / B200_PREFILL)
    shutil.copy(PUBLIC_CUT_DIR / B200_PREFILL, tmp_path / "b.json.gz")
    (tmp_path / "b.json.gz").write_bytes((tmp_path / "b.json.gz").read_bytes()[:300])  # a cut trace: listed, fails
    listed = {s.key: s.kind for s in scan(tmp_path)[0]}
    assert listed == {"a.breakdown.json": Kind.BREAKDOWN, B200_PREFILL: Kind.TRACE, "b.json.gz": Kind.TRACE}
