"""What a capture says before and while vLLM starts (capture/inprocess/start_notice.py), on vLLM's real start-up log."""

from __future__ import annotations

from pathlib import Path

from phaseprof.capture.inprocess.start_notice import StartPhases, engine_version, start_estimate, start_notice

ROOT = Path(__file__).resolve().parents[2]


def test_start_phases_follow_a_real_graph_mode_start() -> None:
    phases = StartPhases()
    seen = [p for line in (ROOT / "traces/h200/graph/vllm-log.txt").read_text().splitlines()
            if (p := phases.feed(line)) is not None]
    assert seen == ["loading weights", "weights loaded", "compiling (torch.compile)", "memory profiling and warm-up",
                    "allocating the KV cache", "CUDA graphs captured", "engine ready"]


def test_start_phases_ignore_unknown_lines() -> None:
    phases = StartPhases()
    assert phases.feed("Resolved architecture: Qwen3NextForCausalLM") is None and phases.phase is None
    assert phases.feed("Starting to load model /x") == "loading weights"
    assert phases.feed("Starting to load model /x") is None  # same phase again: nothing new


def test_estimates_come_from_measured_runs() -> None:
    graph = start_estimate(device_kind="cuda", mode="graph", model="qwen3.5-35b-a3b")
    assert graph.cold_s == (254.0, 343.0) and graph.warm_s == 28
    assert start_estimate(device_kind="cpu", mode="eager", model="tiny-hybrid").cold_s[0] == 6.0
    # Under two minutes in seconds: the eager 35B start (90-235 s) is "90 s-4 min", not "2-4 min".
    assert "a cold start took 90 s-4 min" in start_notice(device_kind="cuda", device_name="NVIDIA H200",
                                                          mode="eager", model="qwen3.5-35b-a3b")
    assert start_estimate(device_kind="cuda", mode="graph", model="llama-3.1-8b").what  # catch-all


def test_notice_names_engine_device_model_mode_and_time(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(tmp_path))  # no compile cache
    line = start_notice(device_kind="cuda", device_name="NVIDIA H200", mode="graph", model="qwen3.5-35b-a3b")
    first, second = line.split("\n")
    assert first == f"engine: {engine_version()} on CUDA (NVIDIA H200), model qwen3.5-35b-a3b, graph mode"
    assert "a cold start took 4-6 min" in line and "~28 s once its compile cache is warm" in line
    (tmp_path / "torch_compile_cache" / "abc").mkdir(parents=True)
    assert "a compile cache exists" in start_notice(device_kind="cuda", device_name="NVIDIA H200", mode="graph",
                                                    model="qwen3.5-35b-a3b")
