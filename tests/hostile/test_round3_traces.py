"""What a trace states is a fact only when it can be one, and the work grows with the
trace only up to a stated bound.

- A memcpy or memset with a negative size (``args.bytes`` -4096) is no size: its bytes are not counted (the
  event still counts, as a memcpy of unknown size) and the breakdown says so in a note; no step, phase or view
  shows a negative byte total.
- A trace of more steps than ``MAX_STEPS`` is refused in one line (naming ``--steps``) before the per-step work.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from phaseprof.commands.main import main


def _memcpy_trace(path: Path, sizes: list[int]) -> Path:
    """A kernel, then one memcpy per size, each launched by its runtime call."""
    events = []
    for i, size in enumerate([None, *sizes]):
        t, corr = 100 + 50 * i, i + 1
        args = {"correlation": corr, "device": 0, "stream": 7}
        if size is not None:
            args["bytes"] = size
        api, cat, name = ("cudaLaunchKernel", "kernel", "gemm") if size is None else \
            ("cudaMemcpyAsync", "gpu_memcpy", "Memcpy HtoD (Pageable -> Device)")
        events += [{"ph": "X", "cat": "cuda_runtime", "name": api, "pid": 1, "tid": 1, "ts": t, "dur": 5,
                    "args": {"correlation": corr}},
                   {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 7, "ts": t + 10, "dur": 20, "args": args}]
    path.write_text(json.dumps({"traceEvents": events, "deviceProperties": [{"id": 0, "name": "NVIDIA H200"}]}))
    return path


@pytest.mark.parametrize("sizes", [[-4096, 8192, 8192], [-(2**62), -1], [-(2**63), 2**62]])
def test_negative_memcpy_sizes_are_not_summed(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              sizes: list[int]) -> None:
    trace = _memcpy_trace(tmp_path / "t.json", sizes)
    assert main(["analyze", str(trace), "-f", "json"]) == 0
    bd = json.loads(capsys.readouterr().out)
    assert sum(s["memcpy_count"] for s in bd["steps"]) == len(sizes)  # the events still count
    assert sum(s["memcpy_bytes"] for s in bd["steps"]) == sum(b for b in sizes if b > 0)
    negative = sum(b < 0 for b in sizes)
    assert f"{negative} memcpy/memset event(s) with a negative size: their bytes are not counted" in bd["notes"]
    assert main(["analyze", str(trace)]) == 0  # the terminal prints the notes
    assert "their bytes are not counted" in " ".join(capsys.readouterr().out.split())


def test_positive_sizes_have_no_note(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(_memcpy_trace(tmp_path / "t.json", [4096, 0])), "-f", "json"]) == 0
    bd = json.loads(capsys.readouterr().out)
    assert sum(s["memcpy_bytes"] for s in bd["steps"]) == 4096
    assert not [n for n in bd["notes"] if "negative size" in n]


def _marker_trace(path: Path, steps: int) -> Path:
    """``steps`` ProfilerStep markers, each with one launched kernel."""
    events = []
    for i in range(steps):
        t = 1000 + 100 * i
        events += [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1, "ts": t,
                    "dur": 90},
                   {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t + 1,
                    "dur": 5, "args": {"correlation": i + 1}},
                   {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": t + 10, "dur": 50,
                    "args": {"correlation": i + 1, "device": 0, "stream": 7}}]
    path.write_text(json.dumps({"traceEvents": events, "deviceProperties": [{"id": 0, "name": "NVIDIA H200"}]}))
    return path


def test_too_many_steps_is_one_line_and_a_window_still_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Item 11: past ``MAX_STEPS`` (200,000: ~2 GB) a trace is refused right after its steps are found, before
    the per-step work (a million steps took ~9 GB and ~92 s); ``--steps`` analyses a window of it. The limit is
    lowered here so that the trace stays small; the real one refuses a million steps in ~20 s and 0.7 GB."""
    from phaseprof.analysis import prepare
    from phaseprof.trace.limits import MAX_STEPS
    from tests.hostile.helpers import one_line_error

    assert MAX_STEPS == 200_000
    monkeypatch.setattr(prepare, "MAX_STEPS", 50)
    trace = _marker_trace(tmp_path / "t.json", 80)
    for fmt in ("table", "json"):
        one_line_error(["analyze", str(trace), "-f", fmt], capsys, "t.json", "80 steps: over the 50 one analysis",
                       "--steps FIRST:LAST")
    assert main(["analyze", str(trace), "--steps", "10:40", "-f", "json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["steps"]) == 30
    monkeypatch.setattr(prepare, "MAX_STEPS", 80)
    assert main(["analyze", str(trace), "-f", "json"]) == 0  # at the limit: analysed
    assert len(json.loads(capsys.readouterr().out)["steps"]) == 80
