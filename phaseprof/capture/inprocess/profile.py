"""Run one request under torch.profiler with a marker per engine step, and write the trace phaseprof reads.

Profiler settings: CPU activity (+ CUDA when the engine runs on CUDA), ``profile_memory=True``,
``record_shapes=False``; ``with_stack=True`` only for ``Hierarchy.STACK``, module scopes from hooks
(``capture.inprocess.module_scopes``) for ``Hierarchy.HOOKS``, installed only while the profiler records. Each
``LLMEngine.step()`` is wrapped in ``record_function(phaseprof_step#<i>_context_<n>(<tok>)_generation_<m>(<tok>))``.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from phaseprof.capture.inprocess.module_scopes import ModuleScopes
from phaseprof.capture.inprocess.routing_hook import RoutingRecorder
from phaseprof.capture.inprocess.steps import DriveResult, StepCounts, StepRecord, drive_requests
from phaseprof.capture.inprocess.timing import host_ttft_s
from phaseprof.capture.shared.options import CaptureOptions, Hierarchy, Phase
from phaseprof.capture.shared.prompts import random_prompt



@dataclass(frozen=True)
class ProfiledRun:
    """The profiled request.

    ``host_s``: the phase's host-clock time under the profiler: TTFT for prefill; for decode the mean host time
    of the profiled decode steps (one token each). ``profiled_steps``: steps that ran under the profiler (each
    has a marker). ``raw_trace``: the exported, unprocessed Chrome trace. ``hierarchy``: how the module tree was
    recorded; ``module_calls``: module forward calls the hooks recorded (0 unless ``hooks``).
    """

    drive: DriveResult
    profiled_steps: int
    host_s: float | None
    raw_trace: Path
    hierarchy: Hierarchy = Hierarchy.OFF
    module_calls: int = 0
    routing: RoutingRecorder | None = None  # MoE routing of the profiled steps (None: not recorded)
    first_profiled_step: int = 0  # index of the first step under the profiler (> 0 when prefill was skipped)

    def was_profiled(self, index: int) -> bool:
        return self.first_profiled_step <= index < self.first_profiled_step + self.profiled_steps


def profile_request(session: Any, req: CaptureOptions, *, workdir: Path, record_routing: bool = True,
                    decode_only: bool = False) -> ProfiledRun:
    """Run the capture's request ``req`` once under torch.profiler; export the Chrome trace into ``workdir``.

    For decode, ``req.profile_decode_steps`` = k stops the profiler after k decode steps (the prefill step is
    always profiled); the request still runs to completion unprofiled, so the engine is left clean.
    ``req.hierarchy``: how the module tree is recorded (``Hierarchy``). ``record_routing``: hook MoE routers for
    the profiled steps (``capture.inprocess.routing_hook``; a dense model has none).
    ``req.concurrency``: requests added at once (prompt ``i`` seeded ``seed + i``; the engine's ``max_num_seqs`` must
    admit them), so the decode steps run at that batch size (e.g. a decode batch of 64 for the routing of a
    batched decode step). ``decode_only`` (decode): the profiler starts at the first step that runs no prefill,
    so a high-concurrency point's many chunked prefill steps stay out of the trace.
    """
    import torch  # noqa: PLC0415
    from torch.profiler import ProfilerActivity, profile, record_function  # noqa: PLC0415

    cuda = session.device.kind == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    phase, hierarchy = req.phase, req.hierarchy
    prompts = [random_prompt(req.prompt_tokens, vocab_size=session.vocab_size, seed=req.seed + i)
               for i in range(max(req.concurrency, 1))]
    prof = profile(activities=activities, profile_memory=True, record_shapes=False,
                   with_stack=hierarchy is Hierarchy.STACK)
    scopes = ModuleScopes()
    limit = req.profile_decode_steps if phase is Phase.DECODE else None
    state = {"on": False, "profiled": 0, "decode": 0, "first": 0, "waiting": decode_only and phase is Phase.DECODE}
    routing = RoutingRecorder() if record_routing else None
    if routing is not None and not routing.install(session.llm):
        routing = None

    def start(i: int) -> None:
        prof.start()
        state["on"], state["first"], state["waiting"] = True, i, False
        if hierarchy is Hierarchy.HOOKS:
            scopes.install()

    def stop() -> None:
        scopes.remove()  # first: no hook may outlive the recording (also after an exception)
        if routing is not None:
            routing.remove()
        if state["on"]:
            if cuda:
                torch.cuda.synchronize()
            prof.stop()
            state["on"] = False

    def step_context(_prev: StepRecord | None, i: int, predicted: StepCounts) -> contextlib.AbstractContextManager:
        if state["waiting"] and predicted.context_tokens == 0 and predicted.generation_requests > 0:
            start(i)
        if not state["on"]:
            return contextlib.nullcontext()
        state["profiled"] += 1
        if routing is not None:
            routing.begin(i)
        return record_function(predicted.marker(i))

    def after_step(step: StepRecord) -> None:
        if routing is not None:
            routing.end()
        if state["on"] and step.counts.context_tokens == 0:
            state["decode"] += 1
        if limit is not None and state["decode"] >= limit:
            stop()

    try:
        if not state["waiting"]:
            start(0)
        drive = drive_requests(session, prompts, req.max_tokens, step_context=step_context, prefix="p",
                               after_step=after_step)
    finally:
        stop()
    raw = workdir / "trace.raw.json"
    prof.export_chrome_trace(str(raw))
    if phase is Phase.PREFILL:
        host = host_ttft_s(drive.requests[0])
    else:
        first = state["first"]
        decode = [s for s in drive.steps[first: first + state["profiled"]] if s.counts.context_tokens == 0]
        host = sum(s.host_s for s in decode) / len(decode) if decode else None
    return ProfiledRun(drive=drive, profiled_steps=state["profiled"], host_s=host, raw_trace=raw,
                       hierarchy=hierarchy, module_calls=scopes.calls, routing=routing,
                       first_profiled_step=state["first"])
