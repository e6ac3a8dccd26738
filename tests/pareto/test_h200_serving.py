"""The committed H200 serving sweeps (``traces/h200/serving/``: the 35B-A3B preset behind ``vllm serve`` with
vLLM's defaults, bf16 and fp8, swept by ``phaseprof sweep --server``) through ``phaseprof pareto``: the frontier
JSON against its schema, the profiled run directories placed on their points, no frontier point dominated;
phaseprof's client clock against vLLM's own ``/metrics`` histograms read around the same requests; the memory
plan's capacity against vLLM's "Maximum concurrency" line of the same servers."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from phaseprof.commands.main import main
from phaseprof.errors import PhaseprofError
from phaseprof.pareto.build import match_profiled, read_sweeps
from phaseprof.pareto.records import PARETO_SCHEMA_PATH
from tests.pareto.dominance import dominates

SERVING = Path(__file__).resolve().parents[2] / "traces/h200/serving"
CEILINGS = SERVING.parent / "ceilings/h200-measured.json"
PROFILED = [SERVING / q / "profiled" / f"c{c}" for q in ("bf16", "fp8") for c in (1, 16, 256)]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("pareto") / "pareto.json"
    argv = ["pareto", str(SERVING / "bf16/decode"), str(SERVING / "fp8/decode"), "--ceilings", str(CEILINGS),
            "--format", "json", "--out", str(out)]
    for p in PROFILED:
        argv += ["--profiled", str(p)]
    assert main(argv) == 0
    return json.loads(out.read_text())


def test_frontier_of_the_served_sweeps(report: dict) -> None:
    jsonschema.validate(report, json.loads(PARETO_SCHEMA_PATH.read_text()))
    assert [c["quant"] for c in report["configs"]] == ["bf16", "fp8"]
    assert all(c["async_scheduling"] is True for c in report["configs"])  # vLLM's serving default, as served
    pts = report["points"]
    assert len(pts) == 10 and {p["concurrency"] for p in pts} == {1, 4, 16, 64, 256}
    xy = [(p["tps_per_gpu"], p["tps_per_user"]) for p in pts]
    for f in report["frontier"]:
        assert not any(dominates(q, (f["tps_per_gpu"], f["tps_per_user"])) for q in xy)
    for p in pts:  # every point off the frontier names one that beats it on both axes
        if p["dominated_by"] is not None:
            cfg, c = p["dominated_by"].rsplit(" c=", 1)
            q = next(q for q in pts if q["config"] == cfg and q["concurrency"] == int(c))
            assert dominates((q["tps_per_gpu"], q["tps_per_user"]), (p["tps_per_gpu"], p["tps_per_user"]))
    profiled = {(p["config"].split()[2], p["concurrency"]): p["breakdown"] for p in pts if p["breakdown"]}
    assert sorted(profiled) == sorted((q, c) for q in ("bf16", "fp8") for c in (1, 16, 256))
    for (q, c), where in profiled.items():
        assert Path(where) == SERVING / q / "profiled" / f"c{c}" and (Path(where) / "breakdown.json").is_file()
    assert all(p["sol"] is not None and 0 < p["sol"]["pct_of_light"] <= 100 for p in pts)
    for c in report["configs"]:  # the capacity wall: the memory plan at vLLM's logged request length is vLLM's
        cap = c["capacity"]
        assert cap["plan_at_vllm_tokens"] == pytest.approx(cap["vllm_max_concurrency"], abs=0.01)
        assert cap["max_concurrency"] == 256 == cap["max_num_seqs"] < cap["kv_max_concurrency"]


def test_a_profiled_run_of_no_point_is_refused(tmp_path: Path) -> None:
    sweeps, _ = read_sweeps([SERVING / "bf16/decode"])
    with pytest.raises(PhaseprofError, match="matches no sweep point"):
        match_profiled(sweeps, [SERVING / "fp8/profiled/c16"])  # the FP8 server's run
    with pytest.raises(PhaseprofError, match="already profiled"):
        match_profiled(sweeps, [SERVING / "bf16/profiled/c16"] * 2)
    with pytest.raises(PhaseprofError, match="no run.json"):
        match_profiled(sweeps, [tmp_path])


@pytest.mark.parametrize("quant", ["bf16", "fp8"])
def test_client_clock_against_vllms_own_metrics(quant: str) -> None:
    """Inter-token latency within 5% of vLLM's histogram mean at every checked concurrency; TTFT too where the
    two windows hold the same requests' prefill (the server's counts include the warm-up round, the client's
    statistics do not: serve.json keeps both)."""
    rec = json.loads((SERVING / quant / "serve.json").read_text())
    assert [m["concurrency"] for m in rec["metrics"]] == [1, 16, 64]
    for m in rec["metrics"]:
        c, h = m["concurrency"], m["histograms"]
        point = json.loads((SERVING / quant / "check" / f"c{c}" / "sweep.json").read_text())["points"][0]
        s = point["serving"]
        itl = h["vllm:inter_token_latency_seconds"]
        assert itl["count"] == (s["rounds"] + 1) * c * (s["output_tokens"] - 1)  # warm-up + timed rounds
        assert s["itl"]["mean_ms"] == pytest.approx(1000 * itl["sum_s"] / itl["count"], rel=0.05)
        ttft = h["vllm:time_to_first_token_seconds"]
        assert ttft["count"] == (s["rounds"] + 1) * c
        assert s["ttft"]["mean_ms"] == pytest.approx(1000 * ttft["sum_s"] / ttft["count"], rel=0.11)


@pytest.mark.parametrize("quant,kv_gib,logged,tokens", [("bf16", 18, "91.26", 759_309), ("fp8", 16, "81.16", 675_233)])
def test_memory_plan_capacity_is_vllms(quant: str, kv_gib: int, logged: str, tokens: int,
                                       capsys: pytest.CaptureFixture) -> None:
    """The servers' own lines (server.log, quoted in README.md): 'GPU KV cache size: 759,309 tokens', 'Maximum
    concurrency for 8,320 tokens per request: 91.26x' (bf16, 18 GiB of KV); 675,233 and 81.16x (fp8, 16 GiB)."""
    rec = json.loads((SERVING / quant / "serve.json").read_text())
    kw = rec["engine_kwargs"]
    assert kw["kv_cache_memory_bytes"] == kv_gib * 2**30 and kw["enable_prefix_caching"] is False
    assert f"{logged}x" in (SERVING / "README.md").read_text()
    assert main(["memory", "--model", "qwen3.5-35b-a3b", "--gpu", "H200", "--max-model-len",
                 str(kw["max_model_len"]), "--kv-budget-gib", str(kv_gib), "--max-num-seqs", "256",
                 "--max-num-batched-tokens", "8192", "--no-prefix-caching", "--format", "json"]) == 0
    budget = json.loads(capsys.readouterr().out)["kv_budget"]
    assert f"{budget['max_concurrency']:.2f}" == logged and budget["kv_cache_tokens"] == tokens


def test_server_log_facts(tmp_path: Path) -> None:
    """``sweep --server --server-log``: vLLM's start-up facts from a real vLLM log (the H200 graph session's),
    one line naming the file when it is missing or holds none."""
    from phaseprof.commands.capture_server import server_log_facts

    log = SERVING.parent / "graph/vllm-log.txt"
    facts = server_log_facts(log)
    assert facts["kv_cache_tokens"] == 166_644 and facts["max_concurrency"] == pytest.approx(20.26)
    empty = tmp_path / "server.log"
    empty.write_text("INFO started\n")
    with pytest.raises(PhaseprofError, match="no vLLM start-up facts"):
        server_log_facts(empty)
    with pytest.raises(PhaseprofError, match="cannot read the server log"):
        server_log_facts(tmp_path / "missing.log")
