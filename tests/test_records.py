"""run.json and sweep.json go through one record each (phaseprof.records): every committed file reads back
without losing a value, the pre-record multi-GPU layout lands in the same fields, and bad files are one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from phaseprof.errors import PhaseprofError
from phaseprof.records import (RUN_SCHEMA_PATH, SWEEP_SCHEMA_PATH, DeviceRecord, EngineInfo, EngineSettings, Headline,
                               ProfileInfo, RunDir, RunRecord, SweepPoint, SweepRecord, TraceFileInfo, schema)
from phaseprof.trace.read import load_tables
from phaseprof.vllm_log import stored_layout

REPO = Path(__file__).resolve().parents[1]
RUNS = sorted((REPO / "traces").rglob("run.json"))
SWEEPS = sorted((REPO / "traces").rglob("sweep.json"))
TP2 = REPO / "traces/h200x2/cli-tp2-eager-decode-2048in-4out/run.json"
CPU_RUN = REPO / "traces/cpu/tiny-hybrid-prefill128-decode8"


def _values(doc: Any) -> Any:
    """The document without null values (a record writes every field it knows, null when not set)."""
    if isinstance(doc, dict):
        return {k: _values(v) for k, v in doc.items() if v is not None}
    if isinstance(doc, list):
        return [_values(v) for v in doc]
    return doc


def _current(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with its startup facts in the current layout (older files hold one ``kv_cache_gib``, written back
    under the name their stored line says: ``vllm_log.stored_layout``)."""
    facts = doc.get("vllm_startup_facts")
    return {**doc, "vllm_startup_facts": stored_layout(facts)} if isinstance(facts, dict) else doc


@pytest.mark.parametrize("path", [p for p in RUNS if p != TP2], ids=lambda p: p.parent.name)
def test_every_committed_run_json_reads_back_whole(path: Path) -> None:
    doc = json.loads(path.read_text())
    rec = RunRecord.read(path)
    assert rec.request.phase in ("prefill", "decode") and rec.model.name and rec.ttft_ms == doc["ttft_ms"]
    assert _values(rec.to_dict()) == _values(_current(doc)) and rec.extra == {}


@pytest.mark.parametrize("path", RUNS, ids=lambda p: f"{p.parents[1].name}-{p.parent.name}")
def test_every_committed_run_json_is_typed_through(path: Path) -> None:
    """Each sub-record a reader needs is typed (no reader looks a key up), whatever layout wrote the file."""
    doc = json.loads(path.read_text())
    rec = RunRecord.read(path)
    assert isinstance(rec.device, DeviceRecord) and rec.device.name == doc["device"]["name"]
    assert isinstance(rec.engine, EngineInfo)
    if doc.get("ttft_ms") is None:  # scripts/gpu/routing_captures.py's batch: routing and kernel time, no latency
        assert rec.clean_ms.get("ttft_ms") is None and rec.routing is not None and rec.request.concurrency > 1
    else:
        assert rec.clean_ms["ttft_ms"] == doc["ttft_ms"] > 0
    if doc.get("headline") is not None:
        assert isinstance(rec.headline, Headline) and rec.headline.median_ms == doc["headline"]["median_ms"]
        assert rec.headline.metric == ("tpot" if rec.request.phase == "decode" else "ttft")
    if doc.get("profile") is not None:
        assert isinstance(rec.profile, ProfileInfo) and rec.profile.extra == {}
    if doc.get("trace") is not None:
        assert isinstance(rec.trace, TraceFileInfo) and rec.trace.extra == {}
    if doc.get("source") == "server":
        assert rec.server is not None and rec.server.url == doc["server"]["url"] and rec.server.extra == {}
    assert rec.execution_mode in ("eager", "graph", None)


@pytest.mark.parametrize("path", SWEEPS, ids=lambda p: f"{p.parents[1].name}-{p.parent.name}")
def test_every_committed_sweep_json_reads_back_whole(path: Path) -> None:
    doc = json.loads(path.read_text())
    rec = SweepRecord.read(path)
    assert len(rec.points) == len(doc["points"]) > 0
    assert all(isinstance(p, SweepPoint) and p.extra == {} for p in rec.points)  # every key typed
    assert all(rec.x_of(p) == p_doc[rec.x_key] and p.stats(rec.y_key).median_ms == p_doc[rec.y_key]["median_ms"] > 0
               for p, p_doc in zip(rec.points, doc["points"]))
    assert _values(rec.to_dict()) == _values(_current(doc))
    jsonschema.validate(doc, json.loads(SWEEP_SCHEMA_PATH.read_text()))  # the committed schema describes it


def test_the_old_multi_gpu_layout_lands_in_the_same_fields() -> None:
    rec = RunRecord.read(TP2)
    assert (rec.request.phase, rec.request.prompt_tokens, rec.request.max_tokens) == ("decode", 2048, 4)
    assert rec.parallel is not None and rec.parallel.tensor_parallel_size == 2 and not rec.parallel.expert_parallel
    assert len(rec.parallel.rank_traces) == 2 and rec.engine.startup_s > 0
    assert rec.profile == ProfileInfo(overhead_ratio=json.loads(TP2.read_text())["profiler_overhead"])
    assert rec.extra == {"gpus": 2}
    again = RunRecord.from_dict(rec.to_dict())  # written in the new layout, read back the same
    assert again == rec


def test_the_trace_embeds_the_records_flat_subset() -> None:
    """What capture embedded in the committed CPU trace is exactly ``RunRecord.embedded`` of its run.json."""
    rec = RunRecord.read(CPU_RUN / "run.json")
    embedded = load_tables(CPU_RUN / "trace.json.gz").meta.capture
    ratio = embedded.profile.overhead_ratio
    assert ratio == pytest.approx(rec.profile.overhead_ratio, abs=1e-4)
    assert rec.embedded(ratio) == embedded.embedded()


@pytest.mark.parametrize("content, says", [
    ("[1, 2]", "not a run.json"),
    ("{nope", "not valid JSON"),
    ('{"request": 5}', r"Expected `object`, got `int` - at `\$\.request`"),
    ('{"engine": [1]}', r"Expected `object`, got `array` - at `\$\.engine`"),
    ('{"ttft_ms": "fast"}', r"got `str` - at `\$\.ttft_ms`"),
])
def test_bad_run_json_is_one_line_naming_the_file(tmp_path: Path, content: str, says: str) -> None:
    f = tmp_path / "run.json"
    f.write_text(content)
    with pytest.raises(PhaseprofError, match=says) as e:
        RunRecord.read(f)
    assert str(f) in str(e.value) and "\n" not in str(e.value)


def test_a_sweep_record_refuses_other_json(tmp_path: Path) -> None:
    f = tmp_path / "sweep.json"
    f.write_text(json.dumps({"kind": "capture"}))
    with pytest.raises(PhaseprofError, match="not a phaseprof sweep.json"):
        SweepRecord.read(f)


def test_a_sweep_point_keeps_keys_it_does_not_know_and_refuses_bad_types(tmp_path: Path) -> None:
    """A committed decode sweep with a key this version does not know added to a point: the point is typed, the
    key is kept in its ``extra`` and written back; a timing that is not an object is one line naming the file."""
    src = next(p for p in SWEEPS if json.loads(p.read_text())["phase"] == "decode")
    doc = json.loads(src.read_text())
    doc["points"][0]["new_key"] = [1]
    f = tmp_path / "sweep.json"
    f.write_text(json.dumps(doc))
    rec = SweepRecord.read(f)
    assert rec.points[0].extra == {"new_key": [1]} and rec.points[0].tpot.median_ms == doc["points"][0]["tpot"][
        "median_ms"]
    rec.write(tmp_path / "again.json")
    assert _values(json.loads((tmp_path / "again.json").read_text())) == _values(_current(doc))
    doc["points"][0]["tpot"] = 5
    f.write_text(json.dumps(doc))
    with pytest.raises(PhaseprofError, match=r"not a valid sweep point \(points\[0\]\): Expected `object \| null`, got "
                       r"`int` - at `\$\.tpot`") as e:
        SweepRecord.read(f)
    assert str(f) in str(e.value) and "\n" not in str(e.value)


def test_committed_schemas_are_the_records() -> None:
    # Regenerate with: python -m phaseprof.commands.schemas
    for path, cls in ((RUN_SCHEMA_PATH, RunRecord), (SWEEP_SCHEMA_PATH, SweepRecord)):
        assert json.loads(path.read_text()) == json.loads(json.dumps(schema(cls))), path.name
    props = schema(RunRecord)["$defs"]["RunRecord"]["properties"]
    assert "model_config" in props and "extra" not in props


def test_unknown_keys_of_a_sub_record_are_kept_in_its_extra() -> None:
    rec = RunRecord.from_dict({"engine": {"startup_s": 2.5, "new_key": [1]}, "headline": {"metric": "ttft", "x": 1}})
    assert rec.engine.startup_s == 2.5 and rec.engine.extra == {"new_key": [1]} and rec.headline.extra == {"x": 1}
    again = rec.to_dict()
    assert again["engine"]["new_key"] == [1] and again["headline"]["x"] == 1


BREAKDOWNS = sorted((REPO / "traces").rglob("*breakdown.json"))


@pytest.mark.parametrize("path", BREAKDOWNS, ids=lambda p: f"{p.parent.name}-{p.name}")
def test_every_committed_breakdowns_capture_reads_typed_and_writes_back_the_same(path: Path) -> None:
    """A breakdown's ``capture`` section is the trace's embedded subset: typed on read, the same keys, values
    and order on write (committed breakdown JSON stays byte-identical)."""
    from phaseprof.report.json_io import dumps, load_breakdown

    section = json.loads(path.read_text())["capture"]
    bd = load_breakdown(path)
    assert (bd.capture is None) == (section == {})
    assert list(json.loads(dumps(bd))["capture"].items()) == list(section.items())
    if bd.capture is not None:
        assert bd.capture.request.phase == section["phase"] and bd.capture.model.name == section["model"]
        assert bd.capture.clean_ms.get("ttft_ms") == section["ttft_ms"]


def test_run_dir_is_a_directory_or_a_file_inside_it() -> None:
    assert RunDir.open(CPU_RUN).record_file == RunDir.open(CPU_RUN / "trace.json.gz").record_file \
        == CPU_RUN / "run.json"
    assert RunDir.open(CPU_RUN).record == RunRecord.read(CPU_RUN / "run.json")
    assert not RunDir.open(REPO / "traces").has_record


def test_engine_settings_are_read_by_name_from_each_layout() -> None:
    """In-process (engine arguments), the older multi-GPU layout (tp_run.json's ``engine_args``) and a server
    capture (what the server reported): each setting by its vLLM name, None where the record keeps none."""
    cpu = RunRecord.read(CPU_RUN / "run.json").engine_settings
    assert (cpu.max_model_len, cpu.mamba_ssm_cache_dtype, cpu.enable_prefix_caching) == (137, "float32", False)
    tp = RunRecord.read(REPO / "traces/h200x2/tp2-eager-prefill4096-decode8/tp_run.json").engine_settings
    assert (tp.tensor_parallel_size, tp.enable_expert_parallel, tp.max_model_len) == (2, False, 4120)
    served = RunRecord.read(REPO / "traces/h200/serving/bf16/profiled/c1/run.json").engine_settings
    assert (served.max_model_len, served.tensor_parallel_size, served.enable_prefix_caching) == (8320, 1, None)
    with pytest.raises(PhaseprofError, match="max_model_len"):
        EngineSettings.of({"max_model_len": "long"}, source="x.json")
