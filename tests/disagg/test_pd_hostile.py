"""A PD run directory and a PD capture's servers are input like any other.

- Strings a PD run records (connector, model, URLs, link, notes) reach the terminal without control characters
  and markdown inside a fenced block (nothing live); rich markup prints as written.
- A NIXL transfer that is no fact (counters that went down between two readings, a counter of 1e300) is left
  out with a note, never printed negative; any other negative number in handoff.json is one line, exit 2.
- Paths run.json names are confined to the run directory (no ``..``, no absolute path, no link leading out).
- A decode server whose /metrics reports 1e300 costs the transfer, not the capture: the run directory is written.
The real committed 4,096-token H200 PD run is the base of every mutated one.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phaseprof.commands.main import main
from phaseprof.disagg.nixl_metrics import NixlCounters, parse_counters
from phaseprof.disagg.records import read_handoff
from phaseprof.disagg.render import summary_lines, timeline_lines
from phaseprof.disagg.run import read_pd_run
from tests.hostile.helpers import one_line_error
from tests.hostile.test_markdown_injection import _details_ok, _live

from ..conftest import REPO

PD = REPO / "traces/h200/pd/qwen3.5-35b-a3b-fp8-eager-4096in-32out"
#: Terminal control (ANSI CSI and OSC 8 hyperlink, BEL, C1 CSI, NUL), a right-to-left override, rich markup, and
#: markdown/HTML that would be live in a PR comment.
HOSTILE = ("\x1b[31mRED\x1b[0m \x1b]8;;file:///etc/passwd\x07OSC\x1b]8;;\x07 \x00NUL \x07 \x9b2J \u202eRTL "
           "[link=file:///etc/passwd]PAYRICH[/link] [/] ![PAYIMAGE](http://127.0.0.1:9/i.png) "
           "<img src=x onerror=alert(1)> [PAYLINK](http://127.0.0.1:9/l) ``` <b>PAYBOLD</b>")
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
#: A negative number stated in text: a minus sign not inside a word (model names hold "-35b").
NEGATIVE = re.compile(r"(?<![\w.\-])-\d")


def _copy(tmp_path: Path, name: str = "run") -> Path:
    run = tmp_path / name
    shutil.copytree(PD, run)
    return run


def _edit(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def _hostile_strings(h: dict[str, Any]) -> None:
    for key in ("connector", "model", "prefill_url", "decode_url"):
        h[key] = f"{HOSTILE} {h[key]}"
    h["modelled"]["link"] = f"{HOSTILE} nvlink4"
    h["notes"] = [f"- {HOSTILE}", "# heading 1. list"]


@pytest.fixture
def hostile_run(tmp_path: Path) -> Path:
    run = _copy(tmp_path)
    _edit(run / "handoff.json", _hostile_strings)
    return run


def test_terminal_view_has_no_control_and_prints_markup_as_written(hostile_run: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(hostile_run)]) == 0
    out, err = capsys.readouterr()
    assert not CONTROL.search(out + err), repr(CONTROL.search(out + err))
    text = " ".join(out.split())
    assert "[link=file:///etc/passwd]PAYRICH[/link]" in text and "![PAYIMAGE](http://127.0.0.1:9/i.png)" in text
    assert "RTL" in text and "NUL" in text  # the text stays; only the controls go


def test_markdown_view_is_inert(hostile_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(hostile_run), "-f", "markdown"]) == 0
    out = capsys.readouterr().out
    assert not CONTROL.search(out)
    assert [t for t in _live(_details_ok(out)) if t != "pre"] == []
    assert "PAYIMAGE" in out and "PAYBOLD" in out  # shown, as text


def test_json_view_is_the_checked_record(hostile_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(hostile_run), "-f", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kind"] == "pd_handoff" and doc["connector"].startswith("\x1b[31m")  # JSON escapes it: data kept


def test_render_functions_are_safe_for_any_caller(hostile_run: Path) -> None:
    """``capture --decode-server`` and the dashboard print ``summary_lines`` themselves."""
    run = read_pd_run(hostile_run)
    lines = summary_lines(run.handoff) + timeline_lines(None, HOSTILE)
    assert lines and not any(CONTROL.search(line) for line in lines)


# -- item 3: counters that go down are no transfer ----------------------------------------------------------

def test_counters_that_went_down_are_a_note_not_a_negative_fact(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    run = _copy(tmp_path)

    def reset(h: dict[str, Any]) -> None:
        h["requests"][1]["nixl"].update(bytes=-122060800, xfer_ms=-259.8, transfers=-1)
        h["median"]["bytes"] = -5
        h["bytes_ratio"] = -1.0

    _edit(run / "handoff.json", reset)
    h = read_handoff(run / "handoff.json")
    assert h.requests[1].nixl is None and h.requests[0].nixl is not None
    # the stored median is re-derived from the requests whose counters are facts: a true median
    assert h.median.bytes is not None and h.median.bytes > 0 and h.bytes_ratio is None
    assert not any("median NIXL transfer is no fact" in n for n in h.notes)  # that median is gone
    assert any("request 1: the decode server's NIXL counters went down" in n for n in h.notes)
    for fmt in ("table", "markdown", "json"):
        assert main(["analyze", str(run), "-f", fmt]) == 0
        out = capsys.readouterr().out
        if fmt == "json":
            doc = json.loads(out)
            assert doc["requests"][1]["nixl"] is None and doc["median"]["bytes"] > 0
        else:
            assert not NEGATIVE.search(out), NEGATIVE.search(out)
            assert "counters went down" in " ".join(out.split())


@pytest.mark.parametrize(("field", "value"), [("prefill_ms", -1.0), ("ttft_ms", -0.5), ("output_tokens", -3)])
def test_other_negative_numbers_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str,
                                             value: float) -> None:
    run = _copy(tmp_path)
    _edit(run / "handoff.json", lambda h: h["requests"][0].update({field: value}))
    one_line_error(["analyze", str(run)], capsys, "handoff.json", f"requests[0].{field}")


def test_a_timeline_whose_parts_exceed_the_ttft_is_not_laid_out(tmp_path: Path) -> None:
    run = _copy(tmp_path)
    _edit(run / "handoff.json", lambda h: h["requests"][-1].update(ttft_ms=1.0, prefill_ms=0.5, handoff_ms=0.5))
    pd = read_pd_run(run)
    assert pd.timeline is None and "exceed the request's measured TTFT" in (pd.timeline_note or "")


def test_nixl_counters_out_of_range_or_reset() -> None:
    before = NixlCounters(present=True, count=1, bytes=1e6, xfer_s=0.1, descriptors=10)
    ok, why = NixlCounters(present=True, count=2, bytes=3e6, xfer_s=0.3, descriptors=20).since(before)
    assert why is None and ok is not None and ok.bytes == 2_000_000 and ok.transfers == 1
    for after in (NixlCounters(present=True, count=2, bytes=1e300, xfer_s=0.3),
                  NixlCounters(present=True, count=2, bytes=2e6, xfer_s=float("inf"))):
        t, why = after.since(before)
        assert t is None and why == "a NIXL counter out of range"
    t, why = NixlCounters(present=True, count=0, bytes=0.0).since(before)  # a restart: every counter from 0
    assert t is None and why is not None and "went down" in why


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=400))
def test_any_metrics_text_reads_without_failing(text: str) -> None:
    c = parse_counters(text)
    t, why = c.since(NixlCounters(present=True))
    assert (t is None) != (why is None)
    if t is not None:
        assert min(t.transfers, t.bytes, t.descriptors, t.failed, t.xfer_ms, t.post_ms) >= 0


# -- item 15: paths confined to the run directory -----------------------------------------------------------

@pytest.mark.parametrize("where", ["handoff", "prefill.breakdown", "decode.trace"])
@pytest.mark.parametrize("path", ["../../../../etc/passwd", "/etc/passwd", "prefill/../../outside.json", "link"])
def test_paths_lead_nowhere_outside_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str,
                                            path: str) -> None:
    run = _copy(tmp_path)
    outside = tmp_path / "outside.json"
    shutil.copy(PD / "handoff.json", outside)  # a readable record: only the confinement stops it
    (run / "link").symlink_to(outside)

    def point(rec: dict[str, Any]) -> None:
        target = rec["disagg"]
        for part in where.split(".")[:-1]:
            target = target[part]
        target[where.split(".")[-1]] = path

    _edit(run / "run.json", point)
    line = one_line_error(["analyze", str(run)], capsys, "run.json", f"disagg.{where}")
    assert "is not a path inside the run directory" in line or "leads out of the run directory" in line


# -- property test: any mutation of a PD run directory ------------------------------------------------------

numbers = st.one_of(st.integers(-(2**66), 2**66), st.floats(allow_nan=False, allow_infinity=False),
                    st.sampled_from([1e300, -1e-9, 0, -0.0, 2**53 + 1]))
strings = st.one_of(st.text(max_size=40), st.sampled_from([HOSTILE, "../x", "/etc/passwd", "", "`" * 9]))
NUMBER_FIELDS = ["prefill_ms", "handoff_ms", "ttft_ms", "tpot_ms", "output_tokens", "index", "nixl.bytes",
                 "nixl.xfer_ms", "nixl.transfers", "nixl.descriptors", "nixl.failed"]
TOP = ["connector", "model", "prefill_url", "model_note"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=st.lists(st.tuples(st.integers(0, 5), st.sampled_from(NUMBER_FIELDS), numbers), max_size=4),
       texts=st.lists(st.tuples(st.sampled_from(TOP), strings), max_size=3),
       median=st.one_of(st.none(), st.tuples(st.sampled_from(["bytes", "xfer_ms", "ttft_ms"]), numbers)))
def test_any_mutated_pd_run_is_true_numbers_or_one_line(tmp_path_factory: pytest.TempPathFactory,
                                                        capsys: pytest.CaptureFixture[str], edits: list[Any],
                                                        texts: list[Any], median: Any) -> None:
    run = _copy(tmp_path_factory.mktemp("pd"))

    def mutate(h: dict[str, Any]) -> None:
        for i, field, value in edits:
            target = h["requests"][i]
            if field.startswith("nixl."):
                target, field = target["nixl"], field[5:]
            target[field] = value
        for key, value in texts:
            h[key] = value
        if median is not None:
            h["median"][median[0]] = median[1]

    _edit(run / "handoff.json", mutate)
    for fmt in ("table", "markdown"):
        code = main(["analyze", str(run), "-f", fmt])
        out, err = capsys.readouterr()
        assert "Traceback" not in out + err
        if code != 0:
            assert code == 2 and len(err.strip().splitlines()) == 1 and "handoff.json" in err, (code, err)
            continue
        assert not CONTROL.search(out + err)
        pd_part = out.split("engine (")[0]  # the PD summary, before the engines' stored breakdowns
        assert not NEGATIVE.search(pd_part), NEGATIVE.search(pd_part)
        if fmt == "markdown":
            assert [t for t in _live(_details_ok(pd_part)) if t != "pre"] == []


# -- item 4: a 1e300 NIXL counter costs the transfer, not the capture -----------------------------------------

def test_absurd_nixl_counter_keeps_the_run_directory(tmp_path: Path) -> None:
    from tests.capture.test_server_errors import REAL_TRACE, _json, _sse, vllm_like
    from tests.capture.test_server_hostile import respond, serving

    p_dir, d_dir, out = tmp_path / "p", tmp_path / "d", tmp_path / "runs"
    p_dir.mkdir()
    d_dir.mkdir()
    reads = {"n": 0}

    def metrics(write: Callable[[bytes], None]) -> None:  # before each request 0 bytes, after it 1e300
        reads["n"] += 1
        n = reads["n"]
        value = 0.0 if n % 2 else 1e300
        text = (f"vllm:nixl_xfer_time_seconds_count {n}\nvllm:nixl_xfer_time_seconds_sum 0.01\n"
                f"vllm:nixl_bytes_transferred_sum {value}\nvllm:nixl_num_descriptors_sum {n}\n")
        respond(write, 200, text.encode())

    def stop(directory: Path) -> Callable[[Callable[[bytes], None]], None]:
        def route(write: Callable[[bytes], None]) -> None:
            shutil.copy(REAL_TRACE, directory / f"dp0_pp0_tp0_dcp0_ep0_rank0.{time.time_ns()}.pt.trace.json.gz")
            respond(write)
        return route

    prefill_answer = _json({"choices": [{"text": ""}], "kv_transfer_params": {"remote_engine_id": "e",
                                                                              "remote_block_ids": [1]}})
    with serving() as p, serving() as d:
        p.routes = vllm_like(["/start_profile", "/stop_profile"], **{
            "POST /start_profile": (200, b""), "POST /stop_profile": stop(p_dir),
            "POST /v1/completions": prefill_answer})
        d.routes = vllm_like(["/start_profile", "/stop_profile"], **{
            "POST /start_profile": (200, b""), "POST /stop_profile": stop(d_dir),
            "POST /v1/completions": _sse(), "GET /metrics": metrics})
        code = main(["capture", "--server", p.url, "--trace-dir", str(p_dir), "--decode-server", d.url,
                     "--decode-trace-dir", str(d_dir), "--tokens", "16", "--output-tokens", "2", "--reps", "2",
                     "--warmup", "0", "--out", str(out), "--trace-wait", "5"])
    runs = list(out.iterdir()) if out.exists() else []
    assert len(runs) == 1, (code, runs)
    h = read_handoff(runs[0] / "handoff.json")
    assert [r.nixl for r in h.requests] == [None] * len(h.requests)
    assert any("a NIXL counter out of range" in n for n in h.notes), h.notes
    assert code in (0, 2)  # 2 only when a side's breakdown failed (a CPU trace), said in one line; the run is kept
