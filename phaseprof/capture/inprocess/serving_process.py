"""The serving-timing engine in a process of its own: the parent's side (``time_in_own_process``) and the
request/result records both sides share. The child's side is ``serving_child``.

Why a process: an in-process vLLM engine does not reliably give its GPU memory back when it is shut down (its
weights stayed resident: 65 GiB for the 35B-A3B preset), and vLLM's start-up check then refuses the profiling
engine. A process that exits frees everything it held. The parent writes a request, runs
``python -m phaseprof.capture.inprocess.serving_child REQUEST RESULT STATUS``, follows the child's stages through
the status file (one JSON object per line) and reads the timings back from the result file. vLLM's output goes
where the parent's goes (its log file, or the terminal with ``--verbose``).

Besides phaseprof's own request driver, the child times the same requests with ``vllm.LLM.generate`` on the same
engine (``reference``): vLLM alone, the yardstick the driver's numbers must stay close to.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from phaseprof.capture.shared.options import CaptureOptions, EngineOptions, Hierarchy, Mode, Phase, Quant
from phaseprof.capture.shared.timing import PhaseTiming, TimingStats, timing_from_dict
from phaseprof.errors import PhaseprofError


@dataclass(frozen=True)
class ServingResult:
    """What the serving-timing process measured: one timing per point (in the order asked), the
    ``async_scheduling`` vLLM resolved, its start time, and vLLM alone on the same engine (``reference``: the
    headline metric of ``llm.generate`` per point, None where it could not be read)."""

    timings: tuple[PhaseTiming, ...]
    async_scheduling: bool | None
    startup_s: float
    reference: tuple[TimingStats | None, ...]


def engine_doc(o: EngineOptions) -> dict[str, Any]:
    d = asdict(o)
    d["mode"], d["quant"] = str(o.mode), str(o.quant)
    return d


def engine_of(d: dict[str, Any]) -> EngineOptions:
    return EngineOptions(**{**d, "mode": Mode(d["mode"]), "quant": Quant(d["quant"])})


def point_doc(c: CaptureOptions) -> dict[str, Any]:
    d = asdict(c)
    d["phase"], d["out"], d["hierarchy"] = str(c.phase), str(c.out), str(c.hierarchy)
    return d


def point_of(d: dict[str, Any]) -> CaptureOptions:
    return CaptureOptions(**{**d, "phase": Phase(d["phase"]), "out": Path(d["out"]),
                             "hierarchy": Hierarchy(d["hierarchy"])})


# --- the parent ----------------------------------------------------------------------------------------------


def _follow(status: Path, offset: int, on_event: Callable[[dict[str, Any]], None]) -> int:
    """Feed the status file's complete new lines to ``on_event``; the new offset."""
    try:
        with open(status, "rb") as f:
            f.seek(offset)
            data = f.read()
    except OSError:
        return offset
    end = data.rfind(b"\n") + 1
    for line in data[:end].splitlines():
        with contextlib.suppress(ValueError):
            on_event(json.loads(line))
    return offset + end


Launcher = Callable[[list[str]], "subprocess.Popen[bytes]"]


def _launch(argv: list[str]) -> subprocess.Popen[bytes]:
    # stdout/stderr inherited: the parent's file descriptors 1 and 2 point at vLLM's log file (quiet.VllmOutput)
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL)


def time_in_own_process(engine: EngineOptions, points: list[CaptureOptions], *, console: Console,
                        stages: Any, launch: Launcher = _launch) -> ServingResult:
    """Run the serving-timing engine in a child process, showing its stages; its result once it has exited
    (and with it every byte of GPU memory it held). A failure in the child is raised here as its one line."""
    with tempfile.TemporaryDirectory(prefix="phaseprof-serving-") as work:
        req, res, status = Path(work, "request.json"), Path(work, "result.json"), Path(work, "status.jsonl")
        req.write_text(json.dumps({"engine": engine_doc(engine), "points": [point_doc(p) for p in points]}))
        status.touch()
        argv = [sys.executable, "-m", "phaseprof.capture.inprocess.serving_child", str(req), str(res), str(status)]
        t0 = time.perf_counter()
        shown: list[str] = []
        with stages.stage("serving-timing engine (vLLM defaults, own process)") as update:
            def on_event(ev: dict[str, Any]) -> None:
                text = str(ev.get("stage") or "")
                count = f" {ev['done']}/{ev['total']}" if ev.get("done") is not None and ev.get("total") else ""
                detail = ev.get("detail")
                update(detail=f"{text}{count}" + (f": {detail}" if detail else ""))
                if not stages.live and text and (not shown or shown[-1] != text):
                    shown.append(text)
                    console.print(f"serving engine: {text} ({time.perf_counter() - t0:.1f} s)", highlight=False,
                                  markup=False)

            proc = launch(argv)
            offset = 0
            try:
                while proc.poll() is None:
                    offset = _follow(status, offset, on_event)
                    time.sleep(0.25)
            except BaseException:
                proc.kill()
                proc.wait()
                raise
            _follow(status, offset, on_event)
        if not res.exists():
            raise PhaseprofError(f"the serving-timing engine's process ended with exit code {proc.returncode} "
                                 "and no result (vLLM's log says why)", exit_code=1)
        doc = json.loads(res.read_text())
    if "error" in doc:
        raise PhaseprofError(str(doc["error"]), exit_code=int(doc.get("exit_code") or 1))
    return ServingResult(
        timings=tuple(timing_from_dict(t) for t in doc["timings"]), async_scheduling=doc["async_scheduling"],
        startup_s=float(doc["startup_s"]),
        reference=tuple(None if r is None else TimingStats(**{**r, "values_ms": tuple(r["values_ms"])})
                        for r in doc["reference"]))


