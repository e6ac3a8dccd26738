"""Step prediction and the scheduler tap, on small fakes of the scheduler's objects."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from phaseprof.capture.inprocess.steps import ReqState, SchedulerTap, StepCounts, predict_step
from phaseprof.capture.shared.prompts import random_prompt
from phaseprof.trace.markers import parse_step_marker


@pytest.mark.parametrize(("reqs", "budget", "expected"), [
    ([ReqState(128, 0)], 8192, StepCounts(1, 128, 0, 0)),          # whole prompt in one step
    ([ReqState(4096, 0)], 2048, StepCounts(1, 2048, 0, 0)),        # chunked prefill, first chunk
    ([ReqState(4096, 2048)], 2048, StepCounts(1, 2048, 0, 0)),     # second chunk
    ([ReqState(128, 128)], 8192, StepCounts(0, 0, 1, 1)),          # decode
    ([ReqState(128, 140), ReqState(64, 0)], 8192, StepCounts(1, 64, 1, 1)),  # mixed batch
    ([ReqState(32, 32)] * 4, 8192, StepCounts(0, 0, 4, 4)),
])
def test_predict_step(reqs: list[ReqState], budget: int, expected: StepCounts) -> None:
    assert predict_step(reqs, token_budget=budget, max_num_seqs=16) == expected


def test_predict_respects_max_num_seqs() -> None:
    assert predict_step([ReqState(8, 8)] * 4, token_budget=100, max_num_seqs=2) == StepCounts(0, 0, 2, 2)


def test_marker_round_trip() -> None:
    name = StepCounts(1, 4096, 0, 0).marker(0)
    assert name == "phaseprof_step#0_context_1(4096)_generation_0(0)"
    m = parse_step_marker(name)
    assert (m.source, m.index, m.context_tokens, m.generation_tokens) == ("phaseprof", 0, 4096, 0)


class FakeScheduler:
    """Just what the tap reads: ``requests`` (id -> request state) and ``schedule()``."""

    def __init__(self) -> None:
        self.requests = {"a": SimpleNamespace(num_prompt_tokens=100, num_computed_tokens=0),
                         "b": SimpleNamespace(num_prompt_tokens=10, num_computed_tokens=10)}

    def schedule(self, *_args: object) -> SimpleNamespace:
        out = SimpleNamespace(num_scheduled_tokens={"a": 100, "b": 1})
        self.requests["a"].num_computed_tokens = 100  # vLLM advances state inside schedule()
        return out


def test_scheduler_tap_records_and_restores() -> None:
    sched = FakeScheduler()
    tap = SchedulerTap(sched)
    out = sched.schedule()
    assert out.num_scheduled_tokens == {"a": 100, "b": 1}  # passed through unchanged
    assert tap.records == [StepCounts(1, 100, 1, 1)]
    sched.schedule()
    assert tap.records[1] == StepCounts(0, 0, 2, 101)  # both now decoding per the pre-schedule snapshot
    tap.close()
    assert "schedule" not in vars(sched)


def test_random_prompt_is_seeded() -> None:
    a = random_prompt(64, vocab_size=1000, seed=1)
    assert a == random_prompt(64, vocab_size=1000, seed=1) != random_prompt(64, vocab_size=1000, seed=2)
    assert len(a) == 64 and all(10 <= t < 1000 for t in a)
