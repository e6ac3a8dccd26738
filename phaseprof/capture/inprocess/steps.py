"""Drive vLLM one engine step at a time and know what each step computed.

``drive_requests`` adds requests with ``LLMEngine.add_request`` and loops ``LLMEngine.step()``; around every
step it can open a context (the profiler's ``record_function`` marker). A step's marker name needs its context
and generation token counts *before* the step runs, so they are predicted from the scheduler's request state
(``predict_step``); a tap on ``Scheduler.schedule`` records what really was scheduled, and any step whose
prediction was wrong is reported so the trace's marker can be renamed afterwards.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from phaseprof.trace.markers import phaseprof_step_name


@dataclass(frozen=True)
class StepCounts:
    """What one engine step computed: requests and tokens in prefill (context) and in decode (generation)."""

    context_requests: int
    context_tokens: int
    generation_requests: int
    generation_tokens: int

    def marker(self, index: int) -> str:
        return phaseprof_step_name(index, self.context_requests, self.context_tokens,
                                   self.generation_requests, self.generation_tokens)


@dataclass(frozen=True)
class ReqState:
    """A request as the scheduler sees it before a step: prompt length and tokens already computed."""

    prompt_tokens: int
    computed_tokens: int


def predict_step(requests: list[ReqState], *, token_budget: int, max_num_seqs: int) -> StepCounts:
    """What vLLM's V1 scheduler will run next for ``requests`` (in scheduling order), without spec decode:
    a request still in prefill gets min(remaining prompt, budget left) tokens, one in decode gets 1 token."""
    budget = token_budget
    cr = ct = gr = gt = 0
    for req in requests[:max_num_seqs]:
        if budget <= 0:
            break
        remaining = req.prompt_tokens - req.computed_tokens
        if remaining > 0:
            n = min(remaining, budget)
            cr, ct = cr + 1, ct + n
        else:
            n = 1
            gr, gt = gr + 1, gt + 1
        budget -= n
    return StepCounts(cr, ct, gr, gt)


def _snapshot(scheduler: Any) -> dict[str, ReqState]:
    reqs = getattr(scheduler, "requests", None) or {}
    out = {}
    for rid, r in reqs.items():
        prompt = getattr(r, "num_prompt_tokens", None)
        computed = getattr(r, "num_computed_tokens", None)
        if prompt is not None and computed is not None:
            out[rid] = ReqState(int(prompt), int(computed))
    return out


class SchedulerTap:
    """Wraps one scheduler instance's ``schedule`` (instance attribute, removed on close) to record the real
    StepCounts of every scheduling decision. Read-only: the scheduler output is returned unchanged."""

    def __init__(self, scheduler: Any) -> None:
        self.scheduler = scheduler
        self.records: list[StepCounts] = []
        self._orig = scheduler.schedule

        def schedule(*args: Any, **kwargs: Any) -> Any:
            before = _snapshot(scheduler)
            out = self._orig(*args, **kwargs)
            self.records.append(self._counts(out, before))
            return out

        scheduler.schedule = schedule

    @staticmethod
    def _counts(out: Any, before: dict[str, ReqState]) -> StepCounts:
        cr = ct = gr = gt = 0
        for rid, n in (getattr(out, "num_scheduled_tokens", None) or {}).items():
            st = before.get(rid)
            if st is None or st.computed_tokens < st.prompt_tokens:
                cr, ct = cr + 1, ct + int(n)
            else:
                gr, gt = gr + 1, gt + int(n)
        return StepCounts(cr, ct, gr, gt)

    def close(self) -> None:
        with contextlib.suppress(AttributeError):
            del self.scheduler.schedule  # back to the class method


@dataclass(frozen=True)
class StepRecord:
    """One ``LLMEngine.step()`` call: host wall time (``host_s``, perf_counter around the call) and what it ran.

    ``predicted`` named the marker; ``actual`` is what the scheduler really scheduled (None without a tap).
    """

    index: int
    start_s: float
    host_s: float
    predicted: StepCounts
    actual: StepCounts | None

    @property
    def counts(self) -> StepCounts:
        return self.actual or self.predicted

    @property
    def marker(self) -> str:
        return self.predicted.marker(self.index)

    @property
    def is_prefill(self) -> bool:
        return self.counts.context_tokens > 0


@dataclass
class RequestRecord:
    """One request's outcome. Times in seconds.

    - ``metrics``: vLLM's RequestStateStats (``RequestOutput.metrics``) when it exists, else None.
    - ``t_add_s``: perf_counter just before ``add_request``; ``t_first_token_s``/``t_done_s``: just after the
      step() that returned its first token / its last output; ``token_t_s``: after every step() that returned
      tokens of it (inter-token latencies on the host clock).
    """

    request_id: str
    prompt_tokens: int
    t_add_s: float
    t_first_token_s: float | None = None
    t_done_s: float | None = None
    num_output_tokens: int = 0
    metrics: Any | None = None
    token_t_s: list[float] = field(default_factory=list)  # perf_counter after each step() that gave it tokens


@dataclass
class DriveResult:
    """Requests and the steps that served them, in order."""

    requests: list[RequestRecord]
    steps: list[StepRecord] = field(default_factory=list)

    def corrections(self) -> dict[str, str]:
        """Marker names whose prediction differed from what was scheduled: {written name: true name}."""
        return {s.marker: s.actual.marker(s.index) for s in self.steps
                if s.actual is not None and s.actual != s.predicted}


StepContext = Callable[[StepRecord | None, int, StepCounts], contextlib.AbstractContextManager[Any]]


def _null_context(_prev: StepRecord | None, _i: int, _c: StepCounts) -> contextlib.AbstractContextManager[Any]:
    return contextlib.nullcontext()


def make_sampling_params(max_tokens: int) -> tuple[Any, bool]:
    """``SamplingParams(max_tokens, ignore_eos=True, detokenize=False)`` streaming deltas when this vLLM can
    (so each step's new tokens are seen); returns (params, is_delta). A fresh object per request: vLLM's
    ``LLM.generate`` rewrites ``output_kind`` in place."""
    from vllm import SamplingParams  # noqa: PLC0415

    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True, detokenize=False)
    try:
        from vllm.sampling_params import RequestOutputKind  # noqa: PLC0415
    except ImportError:
        return params, False
    if hasattr(RequestOutputKind, "DELTA") and hasattr(params, "output_kind"):
        params.output_kind = RequestOutputKind.DELTA
        return params, True
    return params, False


def drive_requests(session: Any, prompts: list[list[int]], max_tokens: int, *,
                   step_context: StepContext = _null_context, prefix: str = "req",
                   after_step: Callable[[StepRecord], None] | None = None) -> DriveResult:
    """Add all ``prompts`` at once (each generating ``max_tokens``) and step the engine until all finished.

    ``step_context(prev_step, index, predicted)`` wraps each step (e.g. in a profiler marker);
    ``after_step(step)`` runs after each step, outside the context (e.g. to stop the profiler early).
    """
    engine = session.engine
    scheduler = session.scheduler()
    tap = SchedulerTap(scheduler) if scheduler is not None else None
    budget = session.max_num_batched_tokens()
    max_seqs = int(session.plan.kwargs.get("max_num_seqs", 1))
    records: dict[str, RequestRecord] = {}
    result = DriveResult(requests=[])
    delta = False
    try:
        for p in prompts:
            rid = session.next_request_id(prefix)
            params, delta = make_sampling_params(max_tokens)
            rec = RequestRecord(request_id=rid, prompt_tokens=len(p), t_add_s=time.perf_counter())
            engine.add_request(rid, {"prompt_token_ids": p}, params)
            records[rid] = rec
            result.requests.append(rec)
        prev: StepRecord | None = None
        i = 0
        while engine.has_unfinished_requests():
            own = _own_states(scheduler, records, result.requests)
            predicted = predict_step(own, token_budget=budget, max_num_seqs=max_seqs)
            n_before = len(tap.records) if tap else 0
            t0 = time.perf_counter()
            with step_context(prev, i, predicted):
                outputs = engine.step()
            t1 = time.perf_counter()
            actual = tap.records[n_before] if tap and len(tap.records) > n_before else None
            prev = StepRecord(index=i, start_s=t0, host_s=t1 - t0, predicted=predicted, actual=actual)
            result.steps.append(prev)
            _record_outputs(outputs, records, t1, delta=delta)
            if after_step is not None:
                after_step(prev)
            i += 1
    finally:
        if tap is not None:
            tap.close()
    return result


def _own_states(scheduler: Any, records: dict[str, RequestRecord], ordered: list[RequestRecord]) -> list[ReqState]:
    """Scheduler state of our unfinished requests, in scheduling order (running before waiting)."""
    if scheduler is None:
        return [ReqState(r.prompt_tokens, r.prompt_tokens if r.t_first_token_s else 0)
                for r in ordered if r.t_done_s is None]
    snap = _snapshot(scheduler)
    running = [getattr(r, "request_id", None) for r in getattr(scheduler, "running", [])]
    order = [rid for rid in running if rid in snap] + [rid for rid in snap if rid not in running]
    return [snap[rid] for rid in order]


def _record_outputs(outputs: list[Any], records: dict[str, RequestRecord], now: float, *, delta: bool) -> None:
    for out in outputs or []:
        rec = _match(records, getattr(out, "request_id", ""))
        if rec is None:
            continue
        n = sum(len(getattr(c, "token_ids", []) or []) for c in getattr(out, "outputs", [])[:1])
        if n and rec.t_first_token_s is None:
            rec.t_first_token_s = now
        if n:
            rec.token_t_s.append(now)
        rec.num_output_tokens = rec.num_output_tokens + n if delta else max(rec.num_output_tokens, n)
        if getattr(out, "metrics", None) is not None:
            rec.metrics = out.metrics
        if getattr(out, "finished", False):
            rec.t_done_s = now


def _match(records: dict[str, RequestRecord], rid: str) -> RequestRecord | None:
    # vLLM may suffix request ids internally (``r1-8cc2f5ad``); outputs carry the id we gave.
    if rid in records:
        return records[rid]
    for key, rec in records.items():
        if rid.startswith(key + "-"):
            return rec
    return None


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    """Pause Python's garbage collector for a timed region (a collection inside one rep skews it)."""
    import gc  # noqa: PLC0415

    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
