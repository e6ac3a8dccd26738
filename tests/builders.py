"""Tiny Kineto-trace builders for unit tests: a few events inline, the expected numbers beside them.

These build *synthetic* event lists to pin down arithmetic (idle split, step windows); facts about real
kernels and real traces are tested on recorded traces in tests/golden and tests/capture.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any


class TraceBuilder:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self._corr = 0
        self._ext = 0

    def op(self, name: str, ts: float, dur: float, *, cat: str = "cpu_op", tid: int = 1) -> "TraceBuilder":
        self._ext += 1
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur,
                            "args": {"External id": self._ext}})
        return self

    def annotation(self, name: str, ts: float, dur: float) -> "TraceBuilder":
        return self.op(name, ts, dur, cat="user_annotation")

    def runtime(self, name: str, ts: float, dur: float, *, tid: int = 1) -> int:
        self._corr += 1
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 1, "tid": tid, "ts": ts,
                            "dur": dur, "args": {"correlation": self._corr}})
        return self._corr

    def kernel(self, name: str, ts: float, dur: float, corr: int, *, stream: int = 7,
               cat: str = "kernel", nbytes: int | None = None) -> "TraceBuilder":
        args: dict[str, Any] = {"device": 0, "stream": stream, "correlation": corr}
        if nbytes is not None:
            args["bytes"] = nbytes
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
                            "args": args})
        return self

    def launch(self, kernel: str, host_ts: float, host_dur: float, gpu_ts: float, gpu_dur: float, *,
               api: str = "cudaLaunchKernel", stream: int = 7) -> "TraceBuilder":
        c = self.runtime(api, host_ts, host_dur)
        return self.kernel(kernel, gpu_ts, gpu_dur, c, stream=stream)

    def memory(self, ts: float, nbytes: int, *, device_type: int = 1) -> "TraceBuilder":
        self.events.append({"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1,
                            "tid": 1, "ts": ts, "args": {"Bytes": nbytes, "Device Type": device_type,
                                                         "Device Id": 0 if device_type else -1}})
        return self

    def write(self, path: Path, **top: Any) -> Path:
        doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "Test GPU"}],
               "distributedInfo": {"backend": "none", "rank": 0, "world_size": 1}, **top,
               "traceEvents": self.events}
        data = json.dumps(doc).encode()
        path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
        return path
