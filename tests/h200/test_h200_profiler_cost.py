"""The profiler's own cost, named. What a trace was recorded with (``trace/recording.py``), the
Python-stack recorder's host time per phase (``analysis/profiler_cost.py``) and a verdict that never calls a step
host-bound on the profiler's account without saying so (``analysis/verdict.py``), on the committed H200 traces:
vLLM's own profiler with stacks (served piecewise-graph prefill ``server-tp1``, in-process eager ``own-eager``:
both cut down to their module frames, whose ids still count every frame recorded) and phaseprof's captures
without stacks.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from phaseprof.analysis.pipeline import AnalysisConfig, analyze
from phaseprof.commands.main import main
from phaseprof.defaults import PYTHON_FRAME_COST_US
from phaseprof.sol.attach import reported
from phaseprof.trace.recording import read_recording

REPO = Path(__file__).resolve().parents[2]
H200 = REPO / "traces/h200"
SERVED_PREFILL = H200 / "server-tp1/prefill/rank0-prefill4096-and-empty-step.pt.trace.json.gz"
OWN_EAGER = H200 / "own-eager/vllm-own-eager-prefill4096-decode1.pt.trace.json.gz"
PLAIN = H200 / "plain/graph_decode_plain_profiler_6steps.json.gz"
HOOKS_EAGER = H200 / "hooks/eager-prefill-4096/trace.json.gz"


def _bd(path: Path, model_config: str | None = "qwen3.5-35b-a3b"):
    """What ``phaseprof analyze`` reports: the breakdown with its verdicts."""
    return reported(analyze(path, config=AnalysisConfig.with_rules(None, model_config=model_config)))


def test_recording_settings_read_from_the_trace():
    served = read_recording(SERVED_PREFILL)
    assert served.settings() == {"with_stack": True, "record_shapes": False, "profile_memory": False,
                                 "with_flops": False}  # vLLM 0.23's --profiler-config as serve.json gives it
    assert served.python_events == 33  # the module frames the committed cut keeps (README: 39,479 -> 8,701 events)
    plain = read_recording(PLAIN)  # plain torch.profiler(profile_memory=True), no stacks (its README)
    assert plain.settings() == {"with_stack": False, "record_shapes": False, "profile_memory": True,
                                "with_flops": False}
    hooks = read_recording(HOOKS_EAGER)  # phaseprof's module scopes are cpu_ops, not Python frames
    assert not hooks.with_stack and hooks.python_events == 0


@pytest.mark.public
def test_recording_settings_of_public_traces(public_dir):
    b200 = read_recording(public_dir / "TraceLens__b200__eager_trace.json.gz")
    assert b200.with_stack and b200.record_shapes and not b200.profile_memory
    tb = read_recording(public_dir / "kineto-tb_plugin__resnet50_num_workers_0__worker0.1623143089861.pt.trace.json.gz")
    assert not tb.with_stack and tb.record_shapes and tb.profile_memory


def test_frames_of_a_cut_trace_are_counted_by_their_ids():
    """The committed served trace kept 33 of its Python frames; their ids say how many the recorder wrote in the
    4,096-token prefill step (README of server-tp1: 2,451..31,252 inside the step's annotation)."""
    bd = _bd(SERVED_PREFILL)
    cost = bd.profiler
    assert cost is not None and cost.recorded_with["with_stack"]
    (pre,) = cost.phases
    assert pre.phase == "prefill"
    assert 28_800 <= pre.python_frames <= 29_000
    lo, hi = PYTHON_FRAME_COST_US
    assert pre.overhead_low_us == pytest.approx(pre.python_frames * lo)
    assert pre.overhead_high_us == pytest.approx(pre.python_frames * hi)
    (ph,) = bd.phases
    assert pre.overhead_high_pct == pytest.approx(100 * pre.overhead_high_us / ph.wall_us)
    # piecewise graphs: the GPU is busy 86% of the step, the recorder's time hidden behind it: GPU-bound, unchanged
    (v,) = bd.verdicts.phases
    assert v.bound == "GPU-bound" and "profiler" not in v.line


def test_eager_prefill_is_not_host_bound_on_the_profilers_account():
    """vLLM's own eager profile (stacks on): the prefill step took 220 ms with the GPU busy 42% of it (the clean
    TTFT is 108.9 ms, result.json); 67,980 Python frames were recorded in it. Before the profiler's cost was named: "host-bound". The
    decode step is host-bound even without the recorder (eager decode: clean TPOT 81.1 ms, GPU busy ~7 ms)."""
    bd = _bd(OWN_EAGER)
    pre, dec = bd.verdicts.phases
    assert pre.busy_pct < 50  # the rule alone says host-bound ...
    assert pre.bound == "profiler-bound" and not pre.line.startswith("prefill: host-bound")  # ... its account not
    assert pre.line.endswith("not host-bound on the server's account")
    assert re.search(r"Python-stack recording ~41-116 ms of its 220 ms \(67,980 frames, estimate\)", pre.line)
    assert dec.bound == "host-bound"
    assert "even without the profiler's Python-stack recording" in dec.line and "own account" in dec.line
    # the clean run (no profiler) agrees: TTFT 108.9 ms, inside the estimate's range of the unprofiled step
    clean = json.loads((OWN_EAGER.parent / "result.json").read_text())["tasks"]["timing_prefill"]["ttft"]
    wall_ms = bd.phases[0].wall_us / 1e3
    cost = bd.profiler.phase("prefill")
    assert wall_ms - cost.overhead_high_us / 1e3 <= clean["median_ms"] <= wall_ms - cost.overhead_low_us / 1e3


def test_no_stacks_no_estimate_and_verdicts_unchanged():
    bd = _bd(PLAIN)
    assert bd.profiler is not None and not bd.profiler.recorded_with["with_stack"]
    assert bd.profiler.recorded_with["profile_memory"] and bd.profiler.phases == []
    assert all("profiler" not in v.line for v in bd.verdicts.phases)


def test_stated_in_terminal_and_json(tmp_path, capsys):
    out = tmp_path / "bd.json"
    assert main(["analyze", str(OWN_EAGER), "--model-config", "qwen3.5-35b-a3b", "--json", str(out)]) in (0, None)
    text = capsys.readouterr().out
    flat = " ".join(text.split())
    assert "recorded with: with_stack (1,359 Python frames in the file, numbered as 119,180 recorded" in flat
    assert "profiler cost, prefill: 67,980 Python frames recorded in its steps x 0.6-1.7 us = 40.8-115.6 ms" in flat
    assert "prefill: profiler-bound" in flat
    doc = json.loads(out.read_text())
    assert doc["profiler"]["recorded_with"] == {"with_stack": True, "record_shapes": False, "profile_memory": False,
                                                "with_flops": False}
    assert [p["python_frames"] for p in doc["profiler"]["phases"]] == [67_980, 51_200]
    assert doc["verdicts"]["phases"][0]["bound"] == "profiler-bound"


@pytest.mark.parametrize("frames,bound,says", [
    (20_000, "host-bound", "host-bound on its own account"),  # 12-34 ms: the GPU stays idle most of the step
    (50_000, "profiler-bound", "host-bound on the server's account only if the recorder cost under"),
    (68_000, "profiler-bound", "not host-bound on the server's account"),
], ids=["small", "only-the-high-end", "even-the-low-end"])
def test_where_the_estimate_puts_a_host_bound_step(frames, bound, says):
    """The verdict rule on the eager prefill's real numbers (220 ms wall, GPU busy 42%, host-starved 56%), with
    the recorder's frame count varied: host-bound, profiler-bound by the high end only (then the per-frame cost
    at which the step would be just host-bound is given, and it is right), profiler-bound by both ends."""
    from phaseprof.analysis.profiler_types import PhaseProfilerCost
    from phaseprof.analysis.verdict import BOUND_BUSY_PCT, phase_verdict

    ph = _bd(OWN_EAGER).phases[0]
    lo, hi = PYTHON_FRAME_COST_US
    cost = PhaseProfilerCost(phase="prefill", python_frames=frames, overhead_low_us=frames * lo,
                             overhead_high_us=frames * hi, overhead_low_pct=0.0, overhead_high_pct=0.0)
    v = phase_verdict(ph, device="gpu", profiler=cost)
    assert v.bound == bound and says in v.line, v.line
    if "only if" in v.line:
        per_frame = float(re.search(r"cost under ([0-9.]+) us a frame", v.line).group(1))
        assert lo < per_frame < hi
        assert 100 * ph.gpu_busy_us / (ph.wall_us - per_frame * frames) == pytest.approx(BOUND_BUSY_PCT, abs=0.5)
    assert phase_verdict(ph, device="gpu").bound == "host-bound"  # without the estimate: the bare rule


def test_stated_in_markdown():
    from phaseprof.report.markdown import breakdown_markdown

    md = breakdown_markdown(_bd(OWN_EAGER))
    assert "- recorded with: with\\_stack (1,359 Python frames in the file" in md
    assert "- profiler cost, decode: 51,200 Python frames recorded in its steps x 0.6-1.7 us = 30.7-87.0 ms" in md
    assert "- **prefill: profiler-bound" in md
