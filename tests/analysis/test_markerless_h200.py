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
    # No token counts without markers: the phases come from the kernels each step ran, and say so.
    assert [s.phase for s in steps] == ["prefill", "decode", "decode", "decode", "decode"]
    inferred = {ip.step: ip for ip in bd.attribution.inferred_phases}
    assert sorted(inferred) == [0, 1, 2, 3, 4]
    assert "chunk_gated_delta_rule" in inferred[0].evidence  # chunked GDN over the prompt
    assert "fused_recurrent_gated_delta_rule" in inferred[1].evidence  # recurrent GDN for one token
    assert bd.attribution.mode == "full graphs"  # decode steps each replay one graph
