"""The pareto arithmetic on inline inputs: dominance and the frontier, serving metrics of a round, the
committed schema equal to the records."""

from __future__ import annotations

import itertools
import json

from hypothesis import given
from hypothesis import strategies as st

from phaseprof.capture.shared.serving import RequestTimes, serving_metrics
from phaseprof.pareto.build import frontier_indices
from phaseprof.pareto.records import PARETO_SCHEMA_PATH, pareto_schema
from tests.pareto.dominance import dominates


def test_frontier_of_a_small_set() -> None:
    xy = [(1.0, 5.0), (2.0, 4.0), (1.0, 4.0), (3.0, 1.0), (3.0, 1.0), (0.5, 0.5)]
    # (1,4) is beaten by (2,4); the second (3,1) ties the first; (0.5,0.5) by everything
    assert frontier_indices(xy) == [3, 1, 0]


@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), min_size=1, max_size=12))
def test_frontier_points_are_not_dominated_and_the_rest_are(xy: list[tuple[int, int]]) -> None:
    pts = [(float(a), float(b)) for a, b in xy]
    front = frontier_indices(pts)
    for i in front:
        assert not any(dominates(q, pts[i]) for q in pts)
    for i in set(range(len(pts))) - set(front):
        assert any(dominates(pts[j], pts[i]) or (pts[j] == pts[i] and j in front) for j in range(len(pts)))
    assert len({pts[i] for i in front}) == len(front)  # one point per tie


def test_serving_metrics_of_two_rounds() -> None:
    # round 1: two requests sent at 0 s, done at 1 s and 2 s; round 2: one request, 1 s of wall time
    r1 = [RequestTimes(0.0, 1.0, 0.1, 0.010, (0.010, 0.010), 10, 90),
          RequestTimes(0.0, 2.0, 0.2, 0.020, (0.020,), 10, 90)]
    r2 = [RequestTimes(5.0, 6.0, 0.3, 0.030, (), 10, 90), RequestTimes(5.0, 6.0, 0.3, 0.030, (), 10, 90)]
    m = serving_metrics([r1, r2], concurrency=2, prompt_tokens=10, output_tokens=90, world_size=2,
                        latency_source="host_clock")
    assert m.ttft.p50_ms == 250.0 and m.ttft.n == 4
    assert m.tpot.p50_ms == 25.0 and abs(m.tps_per_user - 40.0) < 1e-9
    assert m.itl is not None and m.itl.n == 3
    # per round: 2 requests / wall (2 s, 1 s); 180 output and 200 total tokens; medians of the two rounds
    assert m.request_per_s == 1.5 and m.output_tok_per_s == 135.0 and m.total_tok_per_s == 150.0
    assert m.tps_per_gpu == 75.0 and m.output_tps_per_gpu == 67.5


def test_committed_schema_is_the_records() -> None:
    # Regenerate with: python -m phaseprof.commands.schemas
    assert json.loads(PARETO_SCHEMA_PATH.read_text()) == json.loads(json.dumps(pareto_schema()))


def test_dominance_is_strict() -> None:
    for a, b in itertools.product([(1.0, 1.0), (1.0, 2.0), (2.0, 1.0)], repeat=2):
        assert not (dominates(a, b) and dominates(b, a))
    assert not dominates((1.0, 1.0), (1.0, 1.0))


def test_floor_is_at_least_the_bytes_over_bandwidth() -> None:
    """A decode step at batch b cannot beat its weights + KV/state bytes over HBM bandwidth (the issue's bound);
    the floor of the 35B-A3B preset on the H200 datasheet is at least that, and grows with the batch."""
    from phaseprof.pareto.build import sol_floor
    from phaseprof.pareto.records import Percentiles, ServingMetrics
    from phaseprof.presets import load_preset
    from phaseprof.sol.ceilings import spec_by_name
    from phaseprof.sol.model import sol_model
    from phaseprof.sol.work import StepTokens, Work, step_work

    model = sol_model(load_preset("qwen3.5-35b-a3b").hf_config)
    h200 = spec_by_name("H200")
    lat = Percentiles(p50_ms=50.0, p90_ms=50.0, p99_ms=50.0, mean_ms=50.0, n=1)  # an input, not a measurement
    floors = []
    for c in (1, 16, 256):
        m = ServingMetrics(concurrency=c, rounds=1, prompt_tokens=1024, output_tokens=128, ttft=lat, tpot=lat,
                           itl=None, latency_source="input", request_per_s=1.0, output_tok_per_s=1.0,
                           total_tok_per_s=10.0, world_size=1, tps_per_gpu=10.0, output_tps_per_gpu=1.0,
                           tps_per_user=20.0)
        f = sol_floor(m, model, h200)
        moved = sum(step_work(model, StepTokens(decode_kv_lens=(1024 + 64,) * c)).values(), Work()).bytes
        assert f.floor_tpot_ms >= moved / (h200.hbm_tbps * 1e12) * 1e3
        assert f.pct_of_light == 100 * f.floor_tpot_ms / 50.0 and f.tps_per_user == 1e3 / f.floor_tpot_ms
        assert f.tps_per_gpu == 10.0 * 50.0 / f.floor_tpot_ms
        floors.append(f.floor_tpot_ms)
    assert floors == sorted(floors)
