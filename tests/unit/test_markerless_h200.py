"""Steps found without any marker, on a real H200 trace recorded by a plain torch.profiler around llm.generate."""

from pathlib import Path

from phaseprof.analysis.pipeline import analyze_trace

TRACE = Path(__file__).resolve().parents[2] / "traces/h200/plain/graph_decode_plain_profiler_6steps.json.gz"


def test_steps_inferred_from_the_sampler_kernel():
    bd = analyze_trace(TRACE)
    assert bd.step_detection["method"] == "inferred:sampler-kernel"
    steps = bd.steps
    assert len(steps) == 5
    # Decode steps replay one full CUDA graph each and run the same kernels; the first step is the prefill.
    assert [s.launches.graph_launches for s in steps[1:]] == [1, 1, 1, 1]
    assert len({s.kernels for s in steps[1:]}) == 1 and steps[0].kernels > steps[1].kernels
    assert all(s.phase == "unknown" for s in steps)  # no token counts without markers: said, not guessed
