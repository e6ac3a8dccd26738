"""`phaseprof sweep --show` prints committed real sweeps without starting an engine."""

from pathlib import Path

from phaseprof.commands.main import main

ROOT = Path(__file__).resolve().parents[2]


def test_show_prints_the_h200_graph_sweep(capsys):
    (d,) = sorted((ROOT / "traces/h200/graph").glob("*sweep-prefill-128-8192"))
    assert main(["sweep", "--show", str(d)]) == 0
    out = capsys.readouterr().out
    assert "prefill sweep" in out and "8192" in out and "150.31" in out  # TTFT median at 8K, graph mode


def test_show_rejects_other_files(tmp_path, capsys):
    p = tmp_path / "x.json"
    p.write_text('{"schema_version": "1.0"}')
    assert main(["sweep", "--show", str(p)]) == 2
    assert "not a phaseprof sweep.json" in capsys.readouterr().err
