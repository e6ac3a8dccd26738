"""The committed H200 disaggregated runs (``traces/h200/pd/``: two `vllm serve` engines of the 35B-A3B preset on
one H200, NixlConnector, captured by ``phaseprof capture --server P --decode-server D``): the bytes the decode
server's NIXL counters read per request against a hand computation from the model config (seed 004's
arithmetic) and against the planner; the record against its schema; the profiled request's timeline from both
breakdowns; ``phaseprof analyze`` of such a run."""

from __future__ import annotations

import json
import math
from pathlib import Path

import jsonschema
import pytest

from phaseprof.commands.main import main
from phaseprof.disagg.nixl_metrics import parse_counters
from phaseprof.disagg.records import HANDOFF_SCHEMA_PATH, read_handoff
from phaseprof.disagg.render import summary_lines, timeline_lines
from phaseprof.disagg.run import read_pd_run
from phaseprof.records import RunRecord

PD = Path(__file__).resolve().parents[2] / "traces/h200/pd"
RUNS = {4096: PD / "qwen3.5-35b-a3b-fp8-eager-4096in-32out", 1024: PD / "qwen3.5-35b-a3b-fp8-eager-1024in-32out",
        -4096: PD / "qwen3.5-35b-a3b-fp8-eager-4096in-32out-ucx-tls"}


def hand_bytes(cfg: dict, prompt_tokens: int) -> int:
    """One request's handoff from the model config, by hand: vLLM 0.23's hybrid page (attention block size
    grown until one attention page holds the GDN state), whole attention blocks of the tokens the prefill
    server computed (the last prompt token is recomputed by the decode server) in every attention layer, plus
    every GDN layer's conv and SSM state (bf16)."""
    n_attn = cfg["layer_types"].count("full_attention")
    n_gdn = cfg["layer_types"].count("linear_attention")
    kv_token = 2 * cfg["num_key_value_heads"] * cfg["head_dim"] * 2  # K and V, bf16, one layer
    key_dim = cfg["linear_num_key_heads"] * cfg["linear_key_head_dim"]
    value_dim = cfg["linear_num_value_heads"] * cfg["linear_value_head_dim"]
    conv = (2 * key_dim + value_dim) * (cfg["linear_conv_kernel_dim"] - 1) * 2
    ssm = cfg["linear_num_value_heads"] * cfg["linear_key_head_dim"] * cfg["linear_value_head_dim"] * 2
    align = 16  # vLLM's default cache block size
    block = align * math.ceil((conv + ssm) / (align * kv_token))
    computed = prompt_tokens - 1
    return math.ceil(computed / block) * block * kv_token * n_attn + (conv + ssm) * n_gdn


@pytest.mark.parametrize("tokens", [4096, 1024, -4096])
def test_measured_handoff_bytes_are_the_hand_computation(tokens: int) -> None:
    run = RUNS[tokens]
    cfg = json.loads((run / "run.json").read_text())["model_config"]
    h = read_handoff(run / "handoff.json")
    expect = hand_bytes(cfg, abs(tokens))
    assert h.prompt_tokens == abs(tokens) and h.prefill_computed_tokens == abs(tokens) - 1
    measured = [r.nixl.bytes for r in h.requests]
    assert all(r.nixl.transfers == 1 and r.nixl.failed == 0 for r in h.requests)
    assert all(abs(b - expect) <= 0.01 * expect for b in measured), (measured, expect)
    assert h.modelled is not None and abs(h.modelled.bytes - expect) <= 0.01 * expect  # the planner agrees
    assert h.modelled.attention_bytes + h.modelled.gdn_bytes == h.modelled.bytes
    assert h.bytes_ratio == pytest.approx(h.median.bytes / h.modelled.bytes, rel=1e-3)


def test_block_size_is_the_one_vllm_logged() -> None:
    """The hand computation's block (544 tokens) is the attention block size vLLM logged at start."""
    cfg = json.loads((RUNS[4096] / "run.json").read_text())["model_config"]
    h = read_handoff(RUNS[4096] / "handoff.json")
    assert h.modelled is not None and h.modelled.block_size_tokens == 544
    assert hand_bytes(cfg, 4096) == h.modelled.bytes


def test_handoff_records_match_their_schema() -> None:
    schema = json.loads(HANDOFF_SCHEMA_PATH.read_text())
    for run in RUNS.values():
        doc = json.loads((run / "handoff.json").read_text())
        jsonschema.validate(doc, schema)
        assert doc["kind"] == "pd_handoff" and len(doc["requests"]) == 6
        assert [r["profiled"] for r in doc["requests"]] == [False] * 5 + [True]


def test_ttft_split_adds_up() -> None:
    for run in RUNS.values():
        for r in read_handoff(run / "handoff.json").requests:
            assert r.prefill_ms > 0 and r.handoff_ms > 0
            assert r.prefill_ms + r.handoff_ms == pytest.approx(r.ttft_ms, rel=1e-6)
            assert r.nixl is not None and 0 < r.nixl.xfer_ms < r.handoff_ms  # the read is inside the handoff


def test_nixl_counters_from_the_decode_servers_metrics() -> None:
    """vLLM's /metrics text of the decode server after the 4,096-token capture (2 warm-up + 5 + 1 profiled)."""
    c = parse_counters((PD / "decode-metrics.txt").read_text())
    h = read_handoff(RUNS[4096] / "handoff.json")
    assert c.present and c.count == 8 and c.failed == 0
    assert c.bytes == 8 * h.requests[0].nixl.bytes
    assert c.descriptors == 8 * h.median.descriptors
    assert not parse_counters("vllm:num_requests_running{engine=\"0\"} 0.0\n").present


def test_profiled_request_timeline() -> None:
    for tokens, run in RUNS.items():
        if tokens < 0:  # the UCX_TLS repeat kept only handoff.json and run.json (traces/h200/pd/README.md)
            pd = read_pd_run(run)
            assert pd.timeline is None and pd.timeline_note == "a breakdown is missing"
            continue
        pd = read_pd_run(run)
        t = pd.timeline
        assert t is not None and not pd.errors, pd.timeline_note
        assert t.prefill_steps == 1 and t.decode_first_step_tokens == 1  # the decode server recomputes 1 token
        p_step = next(s for s in pd.prefill.steps if s.phase == "prefill")
        assert p_step.context_tokens == abs(tokens) - 1
        assert t.xfer_ms == pd.handoff.requests[-1].nixl.xfer_ms
        assert 0 < t.prefill_gpu_ms <= t.prefill_step_ms and 0 < t.decode_first_gpu_ms <= t.decode_first_step_ms
        assert t.other_ms > 0  # the traced parts fit inside the TTFT the proxy measured
        assert sum(s.phase == "decode" for s in pd.decode.steps) == 31  # 32 tokens: 1 from the first step


def test_pd_run_reads_as_one_and_renders_at_80_columns() -> None:
    pd = read_pd_run(RUNS[4096])
    assert pd.record.kind == "pd" and RunRecord.read(PD / "decode-alone" / "run.json").kind == "capture"
    lines = summary_lines(pd.handoff) + timeline_lines(pd.timeline, pd.timeline_note)
    assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
    assert any("NIXL transfer" in line for line in lines)


def test_analyze_a_pd_run(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(RUNS[4096])]) == 0
    out = capsys.readouterr().out
    assert "PD run of qwen3.5-35b-a3b" in out and "measured / modelled: bytes 1.000x" in out
    assert "prefill engine (prefill/breakdown.json)" in out and "decode engine (decode/breakdown.json)" in out
    assert main(["analyze", str(RUNS[4096]), "-f", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["kind"] == "pd_handoff"


def test_analyze_a_run_that_kept_only_its_breakdown(capsys: pytest.CaptureFixture[str]) -> None:
    run = PD.parent / "serving/bf16/profiled/c1"
    assert not list(run.glob("*.json.gz")) and (run / "breakdown.json").is_file()
    assert main(["analyze", str(run)]) == 0
    out = " ".join(capsys.readouterr().out.split())  # rich wraps the long path
    assert "the stored breakdown (no trace kept)" in out and "decode/step ms" in out


def test_decoding_alone_is_as_slow_as_after_a_handoff() -> None:
    """The decode engine's TPOT on its own (same server, a plain `capture --server` decode) is the TPOT after a
    handoff within 10%: this eager FP8 engine's decode is slow by itself, not because of the connector."""
    alone = json.loads((PD / "decode-alone/run.json").read_text())["tpot_ms"]
    after = read_handoff(RUNS[4096] / "handoff.json").median.tpot_ms
    assert after is not None and abs(after - alone) <= 0.1 * alone


def test_an_engine_folder_reads_the_pairs_run_record() -> None:
    """prefill/ and decode/ have no run.json of their own: the pair's (one level up) gives their model and the
    served weight format (fp8) to the speed of light and every other reader."""
    from phaseprof.records import run_record_beside

    for side in ("prefill", "decode"):
        rec = run_record_beside(RUNS[4096] / side / "breakdown.json")
        assert rec is not None and rec.kind == "pd" and rec.quant == "fp8"
    assert run_record_beside(PD / "decode-alone").kind == "capture"
    assert run_record_beside(PD / "nowhere" / "x.json") is None


def test_analyze_reads_a_pd_runs_record_once(monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """run.json tells analyze that the directory is a PD run and is then the run's record: parsed once (JSON
    output: no stored breakdown is printed, whose readers look for run.json on their own)."""
    import phaseprof.records as records

    read = records.read_json_object
    seen: list[Path] = []

    def spy(path: Path, kind: str) -> dict:
        seen.append(Path(path).resolve())
        return read(path, kind)

    monkeypatch.setattr(records, "read_json_object", spy)
    assert main(["analyze", str(RUNS[4096]), "-f", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["kind"] == "pd_handoff"
    assert seen.count((RUNS[4096] / "run.json").resolve()) == 1


@pytest.mark.parametrize("run, says", [
    (PD / "decode-alone", "a server capture; not kept beside it: trace.json.gz, breakdown.json"),
    (PD.parent / "serving/llama-3.1-8b-inprocess-decode-1024in-128out",
     "an in-process capture; not kept beside it: trace.json.gz, breakdown.json"),
    (PD.parents[1] / "h200x2/server-tp2-ep/prefill-4096", "a multi-GPU server capture; not kept beside it: 2 rank "
     "traces (ranks/) (kept: rank0.breakdown.json, rank1.breakdown.json)"),
])
def test_analyze_a_run_that_kept_only_its_record_says_so(run: Path, says: str,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """A run directory with run.json and no trace or breakdown.json: one line saying what the record is and
    which of the files it names were not kept (not "no trace files"), exit 2, nothing on stdout."""
    assert main(["analyze", str(run)]) == 2
    out, err = capsys.readouterr()
    assert not out and err.count("\n") == 1
    assert err == f"error: {run}: nothing to analyse: run.json records {says}\n"
