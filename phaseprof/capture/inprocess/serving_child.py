"""The serving-timing engine in its own process: vLLM's defaults (async scheduling on), clean timings only.

Why a process: an in-process vLLM engine does not reliably give its GPU memory back when it is shut down (its
weights stayed resident: 65 GiB for the 35B-A3B preset), and vLLM's start-up check then refuses the profiling
engine. A process that exits frees everything it held. The parent (``time_in_own_process``) writes a request,
runs ``python -m phaseprof.capture.inprocess.serving_child REQUEST RESULT STATUS``, follows the child's stages
through the status file (one JSON object per line) and reads the timings back from the result file. vLLM's
output goes where the parent's goes (its log file, or the terminal with ``--verbose``).

Besides phaseprof's own request driver, the child times the same requests with ``vllm.LLM.generate`` on the same
engine (``reference``): vLLM alone, the yardstick the driver's numbers must stay close to.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from phaseprof.capture.shared.options import CaptureOptions, EngineOptions, Hierarchy, Mode, Phase, Quant
from phaseprof.capture.shared.timing import PhaseTiming, TimingStats, summarize, timing_from_dict
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
    kwargs: dict[str, Any]


def _engine_doc(o: EngineOptions) -> dict[str, Any]:
    d = asdict(o)
    d["mode"], d["quant"] = str(o.mode), str(o.quant)
    return d


def _engine_of(d: dict[str, Any]) -> EngineOptions:
    return EngineOptions(**{**d, "mode": Mode(d["mode"]), "quant": Quant(d["quant"])})


def _point_doc(c: CaptureOptions) -> dict[str, Any]:
    d = asdict(c)
    d["phase"], d["out"], d["hierarchy"] = str(c.phase), str(c.out), str(c.hierarchy)
    return d


def _point_of(d: dict[str, Any]) -> CaptureOptions:
    return CaptureOptions(**{**d, "phase": Phase(d["phase"]), "out": Path(d["out"]),
                             "hierarchy": Hierarchy(d["hierarchy"])})


# --- the child -----------------------------------------------------------------------------------------------


class StatusStages:
    """The ``progress.Stages`` interface, written as JSON lines to the status file the parent follows."""

    live = True  # start_engine prints its per-phase lines only where nothing draws; the parent draws them
    prefix = ""

    def __init__(self, path: Path) -> None:
        self._f = open(path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115 - closed by the process' exit

    def _emit(self, **event: Any) -> None:
        self._f.write(json.dumps(event) + "\n")

    @contextlib.contextmanager
    def stage(self, text: str, *, total: int | None = None) -> Iterator[Callable[..., None]]:
        self._emit(stage=text, total=total)

        def update(done: int | None = None, detail: str | None = None) -> None:
            self._emit(stage=text, total=total, done=done, detail=detail)

        yield update


def reference_timing(session: Any, c: CaptureOptions) -> TimingStats | None:
    """vLLM alone: ``c.reps`` requests of the same prompts through ``llm.generate`` on the same engine, the phase's
    headline from vLLM's request metrics (None when this vLLM reports none)."""
    from vllm import SamplingParams  # noqa: PLC0415

    from phaseprof.capture.inprocess.timing import metrics_tpot_s, metrics_ttft_s  # noqa: PLC0415
    from phaseprof.capture.shared.prompts import random_prompt  # noqa: PLC0415

    params = SamplingParams(max_tokens=c.max_tokens, ignore_eos=True, detokenize=False)
    values: list[float] = []
    for r in range(c.reps):
        prompts = [{"prompt_token_ids": random_prompt(c.prompt_tokens, vocab_size=session.vocab_size,
                                                      seed=c.seed + k)} for k in range(c.concurrency)]
        for out in session.llm.generate(prompts, params, use_tqdm=False):
            v = metrics_tpot_s(out) if c.phase is Phase.DECODE else metrics_ttft_s(out)
            if v is None:
                return None
            values.append(v)
    return summarize(values) if values else None


def child_main(request: Path, result: Path, status: Path) -> int:
    """Start the engine the request describes, time every point, write the result; the exit code."""
    from phaseprof.capture.inprocess.runner import open_session  # noqa: PLC0415
    from phaseprof.capture.inprocess.timing import time_phase  # noqa: PLC0415

    doc = json.loads(request.read_text())
    stages = StatusStages(status)
    console = Console(file=sys.stderr, width=120)
    session = None
    try:
        session = open_session(_engine_of(doc["engine"]), console=console, stages=stages,  # type: ignore[arg-type]
                               output_redirected=True, announce=False)
        timings, refs = [], []
        for p in doc["points"]:
            c = _point_of(p)
            stages.prefix = f"{c.phase} {c.label}: "
            timings.append(time_phase(session, c, stages=stages).to_dict())  # type: ignore[arg-type]
            with stages.stage("vLLM alone (llm.generate, same engine)"):
                ref = reference_timing(session, c)
            refs.append(None if ref is None else ref.to_dict())
        out = {"timings": timings, "async_scheduling": session.async_scheduling, "startup_s": session.startup_s,
               "reference": refs, "kwargs": session.plan.kwargs}
        code = 0
    except PhaseprofError as e:
        out, code = {"error": str(e), "exit_code": e.exit_code}, e.exit_code
    except Exception as e:  # noqa: BLE001 - one line for the parent, as an in-process engine's error reads
        from phaseprof.capture.inprocess.engine import explain_engine_error  # noqa: PLC0415

        err = (explain_engine_error(e, session.plan) if session is not None
               else PhaseprofError(" ".join(f"{type(e).__name__}: {e}".split())[:400], exit_code=1))
        out, code = {"error": str(err), "exit_code": err.exit_code}, err.exit_code
    tmp = result.with_suffix(".tmp")
    tmp.write_text(json.dumps(out, default=str))
    tmp.replace(result)
    return code


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
        req.write_text(json.dumps({"engine": _engine_doc(engine), "points": [_point_doc(p) for p in points]}))
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
        startup_s=float(doc["startup_s"]), kwargs=dict(doc.get("kwargs") or {}),
        reference=tuple(None if r is None else TimingStats(**{**r, "values_ms": tuple(r["values_ms"])})
                        for r in doc["reference"]))


if __name__ == "__main__":
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    sys.exit(child_main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])))
