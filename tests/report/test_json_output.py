"""The breakdown JSON: committed schema matches the code, real output validates, round-trips, writes atomically."""

from __future__ import annotations

import orjson
import pytest
from jsonschema import Draft202012Validator

from phaseprof.analysis.pipeline import analyze_trace
from phaseprof.commands.main import main
from phaseprof.report.json_io import SCHEMA_PATH, dumps, json_schema, load_breakdown, write_breakdown
from phaseprof.trace.markers import phaseprof_step_name

from ..builders import TraceBuilder


def _trace(tmp_path):
    b = TraceBuilder()
    b.annotation(phaseprof_step_name(0, 1, 16, 0, 0), 0, 100)
    b.launch("fused_moe_kernel", 1, 2, 5, 20)
    b.memory(3, 1024)
    return b.write(tmp_path / "t.json.gz")


def test_committed_schema_is_the_generated_one():
    # Regenerate with: python -m phaseprof.commands.schemas
    assert orjson.loads(SCHEMA_PATH.read_bytes()) == orjson.loads(orjson.dumps(json_schema()))


def test_output_validates_and_round_trips(tmp_path):
    bd = analyze_trace(_trace(tmp_path))
    doc = orjson.loads(dumps(bd))
    Draft202012Validator(orjson.loads(SCHEMA_PATH.read_bytes())).validate(orjson.loads(orjson.dumps(doc)))
    out = write_breakdown(bd, tmp_path / "b.json")
    again = load_breakdown(out)
    assert again == bd
    assert doc["schema_version"] == "1.5" and doc["trace"]["sha256"] == bd.trace.sha256


def test_cli_writes_json_and_markdown(tmp_path, capsys):
    tr = _trace(tmp_path)
    assert main(["analyze", str(tr), "--json", str(tmp_path / "out.json"), "--format", "markdown"]) == 0
    md = capsys.readouterr().out
    assert "| prefill | 1 |" in md and "moe" in md
    assert load_breakdown(tmp_path / "out.json").phases[0].kernel_view[0].bucket == "moe"
    assert not list(tmp_path.glob(".*.tmp"))  # atomic write left no temp files


def test_load_breakdown_rejects_other_documents(tmp_path):
    p = tmp_path / "x.json"
    p.write_text('{"traceEvents": []}')
    with pytest.raises(Exception, match="not a phaseprof breakdown"):
        load_breakdown(p)


def test_schema_generator_finds_and_rewrites_a_stale_schema(tmp_path, monkeypatch, capsys):
    from phaseprof.commands import schemas as schemas_cli

    assert schemas_cli.stale() == {} and schemas_cli.main(["--check"]) == 0  # every committed schema is current
    stale = tmp_path / "breakdown.schema.json"
    stale.write_text("{}\n")
    monkeypatch.setattr(schemas_cli, "SCHEMAS", {stale: json_schema})
    assert schemas_cli.main(["--check"]) == 1 and stale.read_text() == "{}\n"  # --check writes nothing
    assert schemas_cli.main([]) == 0 and orjson.loads(stale.read_bytes()) == orjson.loads(orjson.dumps(json_schema()))
    assert schemas_cli.main(["--bad"]) == 2
    assert f"stale: {stale}" in capsys.readouterr().out
