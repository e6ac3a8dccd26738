"""``trace.recording``: what a trace was recorded with, from its bytes. Inline traces, both JSON layouts
(Kineto's ", " / ": " and compact), read whole and in pieces far smaller than an event."""

from __future__ import annotations

import gzip
import json

import pytest

from phaseprof.trace import recording
from phaseprof.trace.recording import read_recording


def _frame(i: int, ts: float, name: str = 'vllm/x.py(1): f "q"') -> dict:
    return {"ph": "X", "cat": "python_function", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": 1.5,
            "args": {"Python parent id": i - 1, "Python id": i, "Python module id": 0}}


EVENTS = [
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10.0, "dur": 2.0,
     "args": {"External id": 1, "Input Dims": [[2, 2], [2, 2]]}},
    _frame(7, 11.0), _frame(8, 12.5), _frame(40, 30.0, "nn.Module: Linear_0"),
    {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": 13.0, "s": "t",
     "args": {"Bytes": 16, "Total Allocated": 16}},
]


@pytest.mark.parametrize("separators", [(", ", ": "), (",", ":")], ids=["kineto", "compact"])
@pytest.mark.parametrize("piece", [None, 37], ids=["whole", "in-pieces"])
def test_settings_and_frames(tmp_path, monkeypatch, separators, piece):
    if piece is not None:
        monkeypatch.setattr(recording, "_PIECE", piece)
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": EVENTS}, separators=separators).encode()))
    rec = read_recording(path)
    assert rec.settings() == {"with_stack": True, "record_shapes": True, "profile_memory": True,
                              "with_flops": False}
    assert rec.python_events == 3
    assert rec.python_ts_us.tolist() == [11.0, 12.5, 30.0] and rec.python_ids.tolist() == [7, 8, 40]
    # frames recorded in a window: those present, or the span of their ids where larger (a cut trace)
    assert rec.python_frames_in(11.0, 13.0) == 2
    assert rec.python_frames_in(11.0, 31.0) == 40 - 7 + 1
    assert rec.python_frames_in(0.0, 5.0) == 0


def test_no_stacks(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": EVENTS[:1]}))
    rec = read_recording(path)
    assert not rec.with_stack and rec.record_shapes and not rec.profile_memory and rec.python_events == 0
