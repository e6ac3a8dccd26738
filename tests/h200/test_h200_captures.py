"""The real H200 captures (traces/h200: vLLM 0.23.0, qwen3.5-35b-a3b with dummy weights, eager and CUDA-graph
mode), read from the raw events (tests/h200/rawtrace.py: gzip + json, exact integer ns) and compared with
phaseprof's breakdown (``analyze_trace``).

The numbers asserted are what the committed captures contain. Model facts behind them (the preset's config):
40 layers = 30 Gated-DeltaNet + 10 full attention, MoE in every layer (two ``fused_moe_kernel`` GEMMs each, w13 and
w2), so a forward pass runs 80 ``fused_moe_kernel``, 10 FlashAttention-3 kernels and 30 of each GDN kernel.
The decode capture profiled 17 engine steps (1 prefill of 128 tokens + 16 decode); the eager trace was trimmed to
its first 8 by the capture and later cut to its first 3, the graph trace (the capture kept all 17) to its first 5
(run.json ``trace.dropped``; traces/h200/eager/README.md, traces/h200/graph/README.md).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from fractions import Fraction
from math import ceil
from pathlib import Path

import pytest

from phaseprof.analysis.pipeline import analyze_trace

from .rawtrace import NS_SLACK, RawTrace, read

REPO = Path(__file__).resolve().parents[2]
H200 = REPO / "traces" / "h200"


def _run_dir(mode: str, suffix: str) -> Path:
    hits = sorted((H200 / mode).glob(f"*-h200-qwen3.5-35b-a3b-{suffix}"))
    assert len(hits) == 1, f"expected one {mode} run *-{suffix} under {H200 / mode}, found {hits}"
    return hits[0]


CAPTURES = {  # id -> (mode, run directory suffix)
    "eager-prefill": ("eager", "prefill-4096"),
    "graph-prefill": ("graph", "prefill-4096"),
    "eager-decode": ("eager", "decode-128in-32out"),
    "graph-decode": ("graph", "decode-128in-32out"),
}

# Per step kind: kernels, memcpys, memsets, and the host calls that launched GPU work, by API.
PREFILL_4096 = {
    "eager": dict(kernels=2834, memcpy=138, memset=42,
                  launches={"cudaLaunchKernel": 2208, "cuLaunchKernelEx": 626, "cudaMemcpyAsync": 138,
                            "cudaMemsetAsync": 42}),
    # Piecewise CUDA graphs: 41 replays (the graph is split at the 10 attention + 30 GDN layers); 40 of the 42
    # memsets run inside the replays, so only 2 cudaMemsetAsync calls.
    "graph": dict(kernels=1560, memcpy=59, memset=42,
                  launches={"cudaLaunchKernel": 302, "cuLaunchKernelEx": 246, "cudaLaunchKernelExC": 10,
                            "cudaGraphLaunch": 41, "cudaMemcpyAsync": 59, "cudaMemsetAsync": 2}),
}
PREFILL_128 = {
    "eager": dict(kernels=2834, memcpy=138, memset=2,
                  launches={"cudaLaunchKernel": 2208, "cuLaunchKernelEx": 626, "cudaMemcpyAsync": 138,
                            "cudaMemsetAsync": 2}),
    "graph": dict(kernels=1555, memcpy=59, memset=2,
                  launches={"cudaLaunchKernel": 297, "cuLaunchKernelEx": 246, "cudaLaunchKernelExC": 10,
                            "cudaGraphLaunch": 41, "cudaMemcpyAsync": 59, "cudaMemsetAsync": 2}),
}
DECODE_STEP = {
    # every kernel its own launch call: 1996 + 405 + 40 = 2441 kernels
    "eager": dict(kernels=2441, memcpy=94, memset=2,
                  launches={"cudaLaunchKernel": 1996, "cuLaunchKernelEx": 405, "cudaLaunchKernelExC": 40,
                            "cudaMemcpyAsync": 94, "cudaMemsetAsync": 2}),
    # one full-graph replay of 1132 kernels + 30 kernels launched around it (input prep, sampling)
    "graph": dict(kernels=1162, memcpy=21, memset=2,
                  launches={"cudaLaunchKernel": 25, "cuLaunchKernelEx": 5, "cudaGraphLaunch": 1,
                            "cudaMemcpyAsync": 21, "cudaMemsetAsync": 2}),
}
# GPU busy (union, ms, from the raw events): prefill steps to the us; decode steps as (min, max) over the steps.
BUSY_MS = {
    "eager-prefill": {"prefill": 94.111},
    "graph-prefill": {"prefill": 75.387},
    "eager-decode": {"prefill": 21.660, "decode": (6.554, 6.576)},
    "graph-decode": {"prefill": 18.558, "decode": (4.195, 4.225)},
}
DECODE_STEPS_IN_TRACE = {"eager-decode": 2, "graph-decode": 4}

GDN_PREFILL = ("chunk_local_cumsum_scalar_kernel", "chunk_scaled_dot_kkt_fwd_kernel",
               "merge_16x16_to_64x64_inverse_kernel", "recompute_w_u_fwd_kernel",
               "chunk_gated_delta_rule_fwd_kernel_h", "chunk_fwd_kernel_o", "_causal_conv1d_fwd_kernel")
GDN_DECODE = ("fused_recurrent_gated_delta_rule_packed_decode_kernel", "_causal_conv1d_update_kernel")
FA3_FWD = "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<"


def _preset() -> dict:
    return json.loads((REPO / "phaseprof" / "presets" / "qwen3.5-35b-a3b.json").read_text())["hf_config"]


def _layers() -> Counter:
    return Counter(_preset()["layer_types"])


@pytest.fixture(scope="module", params=list(CAPTURES))
def capture(request):
    mode, suffix = CAPTURES[request.param]
    run = _run_dir(mode, suffix)
    trace = run / "trace.json.gz"
    return request.param, mode, run, read(trace), analyze_trace(trace)


def _expected_step(cid: str, mode: str, phase: str) -> dict:
    if phase == "decode":
        return DECODE_STEP[mode]
    return (PREFILL_4096 if cid.endswith("prefill") else PREFILL_128)[mode]


# ------------------------------------------------------------------------------------------------ steps
def test_step_markers_and_phases(capture):
    cid, mode, run, raw, bd = capture
    info = json.loads((run / "run.json").read_text())
    names = [s.name for s in raw.steps]
    if cid.endswith("prefill"):
        assert names == ["phaseprof_step#0_context_1(4096)_generation_0(0)"]
    else:
        n = DECODE_STEPS_IN_TRACE[cid]
        assert names == ["phaseprof_step#0_context_1(128)_generation_0(0)"] + [
            f"phaseprof_step#{i}_context_0(0)_generation_1(1)" for i in range(1, n + 1)]
        # 17 steps were profiled (prefill + 16 decode); the trace keeps the first len(names)
        assert info["profile"]["profiled_steps"] == 17
        assert [s["marker"] for s in info["profile"]["steps"][:17]] == [
            "phaseprof_step#0_context_1(128)_generation_0(0)"] + [
            f"phaseprof_step#{i}_context_0(0)_generation_1(1)" for i in range(1, 17)]
        if n + 1 < 17:
            assert f"kept only the first {n + 1} steps" in info["trace"]["dropped"]
    assert info["trace"]["markers"] == len(names)
    assert [s["marker"] for s in info["profile"]["steps"][:len(names)]] == names
    # phaseprof finds the same steps, from the same markers, with the same phases and token counts
    assert bd.step_detection["method"] == "markers:phaseprof"
    assert [r.label for r in bd.steps] == names
    assert [r.phase for r in bd.steps] == [s.phase for s in raw.steps]
    assert [(r.context_tokens, r.generation_tokens) for r in bd.steps] == [
        (s.context_tokens, s.generation_tokens) for s in raw.steps]
    assert [p.phase for p in bd.phases] == (["prefill"] if cid.endswith("prefill") else ["prefill", "decode"])


def test_every_gpu_activity_was_launched_inside_a_step(capture):
    _, _, _, raw, bd = capture
    assert raw.orphans == []
    assert sum(len(s.activities) for s in raw.steps) == len(raw.activities) == bd.totals["gpu_activities"]


# ---------------------------------------------------------------------------------- per-step counts, busy
def test_kernel_memcpy_memset_counts_per_step(capture):
    cid, mode, _, raw, bd = capture
    for s, row in zip(raw.steps, bd.steps, strict=True):
        want = _expected_step(cid, mode, s.phase)
        got = {"kernels": s.count("kernel"), "memcpy": s.count("memcpy"), "memset": s.count("memset")}
        assert got == {k: want[k] for k in got}, s.name
        assert (row.kernels, row.memcpy_count, row.memset_count) == tuple(got.values()), s.name


def test_gpu_busy_per_step_is_the_union_of_its_activities(capture):
    cid, _, _, raw, bd = capture
    for s, row in zip(raw.steps, bd.steps, strict=True):
        assert abs(row.gpu_busy_us * 1000 - s.busy_ns) <= NS_SLACK, (s.name, row.gpu_busy_us, s.busy_ns)
        assert row.gpu_busy_other_steps_us == 0  # synchronous steps: no other step's work in the window
    want = BUSY_MS[cid]
    assert round(raw.steps[0].busy_ns / 1e6, 3) == want["prefill"]
    if "decode" in want:
        busy = [s.busy_ns / 1e6 for s in raw.phase_steps("decode")]
        lo, hi = want["decode"]
        assert lo <= min(busy) and max(busy) <= hi, busy
    # phase totals add up the same way
    for ph in bd.phases:
        raw_ns = sum(s.busy_ns for s in raw.phase_steps(ph.phase))
        assert abs(ph.gpu_busy_us * 1000 - raw_ns) <= NS_SLACK * ph.steps


def test_launch_calls_by_api_per_step(capture):
    cid, mode, _, raw, bd = capture
    for s, row in zip(raw.steps, bd.steps, strict=True):
        want = _expected_step(cid, mode, s.phase)["launches"]
        assert dict(s.launch_calls) == want, s.name
        # phaseprof counts exactly the calls that launched GPU work (not cudaStreamIsCapturing, event records,
        # cudaFuncSetAttribute, syncs, which the trace also holds inside the step)
        assert row.launches.by_api == want, s.name
        assert row.launches.total == sum(want.values())
        assert row.launches.graph_launches == want.get("cudaGraphLaunch", 0)
        assert set(s.host_calls) > set(s.launch_calls)
        kernel_launches = sum(v for k, v in want.items() if not k.startswith(("cudaMemcpy", "cudaMemset")))
        if mode == "eager":  # one call per kernel
            assert kernel_launches == s.count("kernel")


def test_eager_decode_launches_thousands_of_kernels_per_step_graph_decode_a_handful():
    eager = read(_run_dir("eager", "decode-128in-32out") / "trace.json.gz")
    graph = read(_run_dir("graph", "decode-128in-32out") / "trace.json.gz")
    for s in eager.phase_steps("decode"):
        assert s.launch_calls["cudaLaunchKernel"] + s.launch_calls["cuLaunchKernelEx"] > 2000
        assert "cudaGraphLaunch" not in s.launch_calls
    for s in graph.phase_steps("decode"):
        assert s.launch_calls["cudaGraphLaunch"] == 1
        assert sum(s.launch_calls.values()) == 54
        (replay,) = {a.correlation for a in s.activities
                     if graph.host_call_correlations[a.correlation] == "cudaGraphLaunch"}
        assert graph.kernels_per_correlation[replay] == 1132  # the whole decode forward in one replay
        assert s.count("kernel") == 1132 + 30


# ---------------------------------------------------------------------------------------- kernels
def _phase_acts(raw: RawTrace, phase: str, pred) -> list:
    return [a for s in raw.phase_steps(phase) for a in s.activities if a.kind == "kernel" and pred(a.name)]


def test_fused_moe_kernel_count_and_time_match_phaseprofs_moe_entry(capture):
    cid, _, _, raw, bd = capture
    moe_layers = _preset()["num_hidden_layers"]  # MoE in every layer (decoder_sparse_step 1, no mlp_only_layers)
    for s in raw.steps:
        assert s.kernel_names()["fused_moe_kernel"] == 2 * moe_layers == 80, s.name
    for ph in bd.phases:
        acts = _phase_acts(raw, ph.phase, lambda n: n == "fused_moe_kernel")
        top = ph.top_kernels["moe"][0]
        assert (top.name, top.bucket, top.module) == ("fused_moe_kernel", "moe", "moe")
        assert top.count == len(acts) == 80 * ph.steps
        attributed = sum((raw.attributed[a] for a in acts), Fraction(0))
        assert abs(top.time_us * 1000 - attributed) <= NS_SLACK, (ph.phase, top.time_us, float(attributed))
        duration = sum(a.end - a.start for a in acts)
        if cid == "eager-prefill":  # one stream: nothing overlaps, attributed == raw duration
            assert attributed == duration == 26_504_585
        if cid == "graph-decode" and ph.phase == "decode":
            # the shared expert runs on a second stream next to the routed experts: the overlap is split
            assert {a.stream for a in acts} == {7} and attributed < Fraction(3, 4) * duration


def test_gdn_fla_kernels_present_once_per_gdn_layer(capture):
    _, _, _, raw, bd = capture
    gdn_layers = _layers()["linear_attention"]
    assert gdn_layers == 30
    for s in raw.steps:
        names = s.kernel_names()
        expected = GDN_PREFILL if s.phase == "prefill" else GDN_DECODE
        for prefix in expected:
            hits = {n: c for n, c in names.items() if n.startswith(prefix)}
            assert sum(hits.values()) == gdn_layers, (s.name, prefix, hits)
    for ph in bd.phases:
        gdn = {k.name: k for k in ph.top_kernels["gdn"]}
        for prefix in (GDN_PREFILL if ph.phase == "prefill" else GDN_DECODE):
            (name,) = [n for n in gdn if n.startswith(prefix)]
            acts = _phase_acts(raw, ph.phase, lambda n, name=name: n == name)
            assert gdn[name].count == len(acts) == gdn_layers * ph.steps
            assert abs(gdn[name].time_us * 1000 - sum(raw.attributed[a] for a in acts)) <= NS_SLACK


def test_flash_attention_once_per_attention_layer(capture):
    _, _, _, raw, _ = capture
    attn_layers = _layers()["full_attention"]
    for s in raw.steps:
        assert sum(c for n, c in s.kernel_names().items() if n.startswith(FA3_FWD)) == attn_layers == 10


# ------------------------------------------------------------------------------------- vLLM's log facts
LOG_BLOCK = re.compile(r"^Setting attention block size to (\d+) tokens to ensure that attention page size is "
                       r">= mamba page size\.$", re.M)
LOG_PAD = re.compile(r"^Padding mamba page size by ([\d.]+)% to ensure that mamba page size and attention page "
                     r"size are exactly equal\.$", re.M)
LOG_KV_TOKENS = re.compile(r"^GPU KV cache size: ([\d,]+) tokens$", re.M)
LOG_CONC = re.compile(r"^Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x$", re.M)
LOG_AVAIL = re.compile(r"^Available KV cache memory: ([\d.]+) GiB$", re.M)
LOG_RESERVED = re.compile(r"reserved ([\d.]+) GiB memory for KV Cache as specified by kv_cache_memory_bytes", re.M)
GIB = 1 << 30


def _one(rx: re.Pattern, text: str) -> tuple[str, ...]:
    hits = rx.findall(text)
    assert len(hits) == 1, f"{rx.pattern}: {hits}"
    return hits[0] if isinstance(hits[0], tuple) else (hits[0],)


def _layout(ssm_dtype_bytes: int) -> tuple[int, str, int]:
    """vLLM 0.23's hybrid block arithmetic on the preset's config: (block tokens, padding %, page bytes)."""
    c = _preset()
    attn_per_token = 2 * c["num_key_value_heads"] * c["head_dim"] * 2  # K and V, bf16
    conv_dim = (2 * c["linear_num_key_heads"] * c["linear_key_head_dim"]
                + c["linear_num_value_heads"] * c["linear_value_head_dim"])
    conv = conv_dim * (c["linear_conv_kernel_dim"] - 1) * 2  # bf16 conv state
    ssm = c["linear_num_value_heads"] * c["linear_value_head_dim"] * c["linear_key_head_dim"] * ssm_dtype_bytes
    mamba_page = conv + ssm
    align = 16
    block = align * ceil(mamba_page / (align * attn_per_token))
    page = block * attn_per_token
    return block, f"{100 * (page - mamba_page) / mamba_page:.2f}", page


@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_vllm_block_size_and_padding_match_the_raw_log(mode):
    log = (H200 / mode / "vllm-log.txt").read_text()
    (block,) = _one(LOG_BLOCK, log)
    (pad,) = _one(LOG_PAD, log)
    (tokens,) = _one(LOG_KV_TOKENS, log)
    conc_len, conc = _one(LOG_CONC, log)
    assert (int(block), pad) == (544, "1.49")
    # What every file of the session says equals the log lines
    startup = json.loads((H200 / mode / "startup.json").read_text())["facts"]
    summary = json.loads((H200 / mode / "summary.json").read_text())["tasks"]["engine_start"]["facts"]
    runs = [_run_dir(mode, "prefill-4096"), _run_dir(mode, "decode-128in-32out")]
    for facts in [startup, summary] + [json.loads((r / "run.json").read_text())["vllm_startup_facts"] for r in runs]:
        assert facts["attention_block_size_tokens"] == int(block)
        assert facts["mamba_page_padding_pct"] == float(pad)
        assert facts["kv_cache_tokens"] == int(tokens.replace(",", ""))
        assert facts["max_concurrency"] == float(conc)
        assert facts["max_concurrency_tokens"] == int(conc_len.replace(",", ""))
        for line in facts.get("raw_lines", []):
            assert line in log.splitlines(), line
    # The SSM state is bf16: the run is Qwen3NextForCausalLM (which ignores the config's mamba_ssm_dtype), in
    # bfloat16, with no --mamba-ssm-cache-dtype; the preset's arithmetic gives 544 / 1.49% for bf16 and would
    # give 1056 / 0.76% for a float32 state.
    assert "Resolved architecture: Qwen3NextForCausalLM" in log
    assert "dtype=torch.bfloat16" in log and "mamba_ssm_cache_dtype" not in log
    assert _layout(2)[:2] == (int(block), pad)
    assert _layout(4)[:2] == (1056, "0.76")


@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_vllm_kv_capacity_follows_from_the_block(mode):
    """KV tokens and concurrency as vLLM derives them: pool block = page x 10 layers per group; a request of
    max_model_len needs cdiv(len, block) attention blocks + 1 block for each of the 3 GDN groups."""
    log = (H200 / mode / "vllm-log.txt").read_text()
    block, _, page = _layout(2)
    layers = _layers()
    group = min(layers.values())  # 10 attention + 3 x 10 GDN
    pool_block = page * group
    length = int(_one(LOG_CONC, log)[0].replace(",", ""))
    per_request = ceil(length / block) + layers["linear_attention"] // group  # no prefix caching: 1 GDN block
    tokens = int(_one(LOG_KV_TOKENS, log)[0].replace(",", ""))
    conc = _one(LOG_CONC, log)[1]
    if mode == "graph":  # kv_cache_memory_bytes=4 GiB exactly
        (gib,) = _one(LOG_RESERVED, log)
        candidates = [int(float(gib) * GIB) // pool_block]
    else:  # "Available KV cache memory" is rounded to 0.01 GiB
        (gib,) = _one(LOG_AVAIL, log)
        lo, hi = (float(gib) - 0.005) * GIB, (float(gib) + 0.005) * GIB
        candidates = list(range(int(lo // pool_block), int(hi // pool_block) + 1))
    assert any(int(n / per_request * length) == tokens and f"{n / per_request:.2f}" == conc for n in candidates), \
        (candidates, per_request, tokens, conc)
