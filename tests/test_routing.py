"""phaseprof.routing: load statistics, the npz round trip and its errors (inline ids, one layer per row)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from phaseprof.errors import PhaseprofError
from phaseprof.routing import RoutingRecord, counts_of, gini, hottest, read_routing, write_routing


def test_gini_bounds() -> None:
    assert gini(np.array([3, 3, 3, 3])) == 0.0
    assert gini(np.array([0, 0, 0, 8])) == pytest.approx(3 / 4)  # one of n holds all: (n-1)/n
    assert gini(np.zeros(4)) == 0.0
    # brute force: mean absolute difference over all pairs / (2 mean)
    x = np.array([6, 5, 2, 3, 3, 3, 4, 6])
    brute = np.abs(x[:, None] - x[None, :]).sum() / (2 * len(x) ** 2 * x.mean())
    assert gini(x) == pytest.approx(brute)


def test_counts_and_hottest_from_ids() -> None:
    ids = np.array([[[0, 1], [0, 2], [0, 1]]])  # 1 layer, 3 tokens, top-2 of 4 experts
    (c,) = counts_of(ids, 4)
    assert c.tolist() == [3, 2, 1, 0]
    assert hottest(c) == [0, 1, 2]  # an expert no token chose is not hot
    assert hottest(np.array([1, 2, 2, 0, 5, 2])) == [4, 1, 2, 5]  # ties: lower id first; HOTTEST = 4


def test_round_trip_and_errors(tmp_path: Path) -> None:
    ids = [np.array([[[0, 1], [2, 3]], [[1, 0], [1, 2]]]), np.array([[[3, 2]], [[0, 3]]])]
    rec = write_routing(tmp_path, RoutingRecord(num_experts=4, top_k=2, moe_layers=2, steps=[0, 1],
                                                tokens=[2, 1]), ids)
    assert rec.ids_kept
    r = read_routing(tmp_path, rec.to_dict())
    assert r.distinct() == {0: (4, 3), 1: (2, 2)}
    np.testing.assert_array_equal(r.ids[1], ids[1])
    assert read_routing(tmp_path, None) is None
    assert read_routing(tmp_path, {**rec.to_dict(), "file": None, "why_not": "graph mode"}) is None
    (tmp_path / "routing.npz").write_bytes(b"not an npz")
    with pytest.raises(PhaseprofError, match="routing file not readable"):
        read_routing(tmp_path, rec.to_dict())


def test_a_router_shared_by_a_layer_and_its_runner_is_hooked_once() -> None:
    """vLLM 0.23: FusedMoE.router and FusedMoE.runner.router are one object (the runner is an nn.Module too).
    Hooking it twice gave every call to the second layer index and left the first empty, so no step was kept
    (the first H200 routing run recorded nothing)."""
    import torch

    from phaseprof.capture.inprocess.routing_hook import RoutingRecorder, _moe_routers

    class Router:
        global_num_experts, top_k = 8, 2

        def __init__(self) -> None:
            self.capture_fn = None

        def set_capture_fn(self, fn) -> None:  # noqa: ANN001
            self.capture_fn = fn

    class Runner(torch.nn.Module):
        def __init__(self, router: Router) -> None:
            super().__init__()
            self.router = router

    class Moe(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.router = Router()
            self.runner = Runner(self.router)

    model = torch.nn.Sequential(Moe(), Moe())
    found = _moe_routers(model)
    assert [f[0] for f in found] == [model[0].router, model[1].router]

    class Llm:
        def apply_model(self, func):  # noqa: ANN001, ANN202
            return [func(model)]

    rec = RoutingRecorder()
    assert rec.install(Llm()) and rec.layers == 2
    rec.begin(0)
    for li in range(2):
        model[li].router.capture_fn(torch.tensor([[li, 7]]))
    rec.end()
    assert rec.steps()[0].tolist() == [[[0, 7]], [[1, 7]]]
