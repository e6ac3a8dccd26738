"""The child side of ``serving_process``: ``python -m phaseprof.capture.inprocess.serving_child REQUEST RESULT
STATUS`` starts vLLM with its serving defaults, times every point of the request (and vLLM alone on the same
engine), writes the result file and exits, so that every byte of GPU memory it held is freed."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rich.console import Console

from phaseprof.capture.inprocess.serving_process import engine_of, point_of
from phaseprof.capture.shared.options import CaptureOptions, Phase
from phaseprof.capture.shared.timing import TimingStats, summarize
from phaseprof.errors import PhaseprofError


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
        session = open_session(engine_of(doc["engine"]), console=console, stages=stages,  # type: ignore[arg-type]
                               output_redirected=True, announce=False)
        timings, refs = [], []
        for p in doc["points"]:
            c = point_of(p)
            stages.prefix = f"{c.phase} {c.label}: "
            timings.append(time_phase(session, c, stages=stages).to_dict())  # type: ignore[arg-type]
            with stages.stage("vLLM alone (llm.generate, same engine)"):
                ref = reference_timing(session, c)
            refs.append(None if ref is None else ref.to_dict())
        out = {"timings": timings, "async_scheduling": session.async_scheduling, "startup_s": session.startup_s,
               "reference": refs}
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


if __name__ == "__main__":
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    sys.exit(child_main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])))
