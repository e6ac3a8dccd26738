"""--fail-on: the expression language (parse, evaluate) and its exit codes through the real CLI."""

from __future__ import annotations

import math

import pytest

from phaseprof.commands.main import main
from phaseprof.errors import PhaseprofError
from phaseprof.records import RunRecord
from phaseprof.report.diff import diff_breakdowns
from phaseprof.report.fail_on import Threshold, evaluate, parse_threshold
from phaseprof.report.json_io import write_breakdown

from .builders import K, breakdown, phase


@pytest.mark.parametrize("text, expected", [
    ("moe.share > +2pp", Threshold("moe.share > +2pp", None, "moe", "share", ">", 2.0, "pp")),
    ("decode.launches_per_step > +10%",
     Threshold("decode.launches_per_step > +10%", "decode", None, "launches_per_step", ">", 10.0, "%")),
    ("prefill.gpu_busy_ms>5%", Threshold("prefill.gpu_busy_ms>5%", "prefill", None, "gpu_busy_ms", ">", 5.0, "%")),
    ("attention.time_ms > +1", Threshold("attention.time_ms > +1", None, "attention", "time_ms", ">", 1.0, "")),
    ("decode.gemm.module_time_ms >= 250us",
     Threshold("decode.gemm.module_time_ms >= 250us", "decode", "gemm", "module_time_ms", ">=", 250.0, "us")),
    ("  busy_pct < -5pp ", Threshold("busy_pct < -5pp", None, None, "busy_pct", "<", -5.0, "pp")),
    ("ttft_ms > .5", Threshold("ttft_ms > .5", None, None, "ttft_ms", ">", 0.5, "")),
])
def test_parse(text, expected):
    assert parse_threshold(text) == expected


@pytest.mark.parametrize("text, says", [
    ("moe.share >> 2pp", "expected a number after '>'"),
    ("moe.share = 2", "unexpected '= 2'"),
    ("moe.share > 2 pp extra", "unexpected 'extra'"),
    ("moe.shar > 2pp", "unknown metric 'shar'"),
    ("share > 2pp", "'share' is a bucket metric"),
    ("decod.launches_per_step > 10%", "'decod' is an unknown phase or a bucket"),
    ("x.decode.moe.share > 1", "too many parts"),
    ("moe.decode.share > 1", "unknown phase 'moe'"),
    ("launches_per_step > 10pp", "unit 'pp' does not fit 'launches_per_step'"),
    ("moe.share > 2ms", "unit 'ms' does not fit 'share'"),
    ("moe.share > 2kb", "unknown unit 'kb'"),
    ("decode.ttft_ms > 1", "run-level timing"),
    ("> 2", "must start with a metric name"),
    ("moe. > 2", "a name must follow '.'"),
    ("__import__('os').system('x') > 1", "unexpected"),
    ("", "must start with a metric name"),
])
def test_bad_expressions_say_what_is_wrong(text, says):
    with pytest.raises(PhaseprofError) as e:
        parse_threshold(text)
    msg = str(e.value)
    assert says in msg and "\n" not in msg and msg.startswith(f"bad --fail-on {text!r}")


def _pair():
    a = breakdown(phase("decode", kernels=[K("nvjet", "gemm", 20, 800.0), K("fa3", "attention", 20, 200.0)],
                        launches=100), capture=RunRecord(ttft_ms=50.0))
    b = breakdown(phase("decode", kernels=[K("nvjet", "gemm", 20, 700.0), K("fa3", "attention", 20, 300.0)],
                        launches=115), capture=RunRecord(ttft_ms=48.0))
    return diff_breakdowns(a, b)


@pytest.mark.parametrize("text, observed, failed", [
    ("attention.share > +2pp", 10.0, True),  # 20 % -> 30 % of GPU busy
    ("attention.share > +10pp", 10.0, False),
    ("attention.share > 49%", 50.0, True),  # relative: 20 -> 30 is +50 %
    ("attention.time_ms > +0.04", 0.05, True),  # 0.1 -> 0.15 ms per step
    ("attention.time_ms > 60us", 50.0, False),
    ("gemm.share < -5pp", -10.0, True),
    ("decode.launches_per_step > +10%", 15.0, True),
    ("launches_per_step > +20%", 15.0, False),
    ("launches_per_step >= 15", 15.0, True),
    ("ttft_ms > 0", -2.0, False),
    ("moe.share > 0pp", 0.0, False),  # a known bucket absent on both sides: 0 -> 0
])
def test_evaluate(text, observed, failed):
    (r,) = evaluate([parse_threshold(text)], _pair())
    assert r.observed == pytest.approx(observed) and r.failed is failed


def test_relative_change_from_zero_is_infinite():
    a = breakdown(phase(kernels=[K("nvjet", "gemm", 2, 100.0)]))
    b = breakdown(phase(kernels=[K("nvjet", "gemm", 2, 100.0), K("fused_moe_kernel", "moe", 2, 1.0)]))
    (r,) = evaluate([parse_threshold("moe.time_ms > 1000%")], diff_breakdowns(a, b))
    assert math.isinf(r.observed) and r.failed


@pytest.mark.parametrize("text, says", [
    ("prefill.wall_ms > 1%", "phase 'prefill' is not in both inputs"),
    ("tpot_ms > 1", "neither input carries a clean tpot_ms"),
    ("atention.share > 1pp", "unknown bucket 'atention'"),
])
def test_checks_that_cannot_be_evaluated_are_errors_not_passes(text, says):
    with pytest.raises(PhaseprofError, match=says):
        evaluate([parse_threshold(text)], _pair())


@pytest.fixture()
def pair_files(tmp_path):
    a = breakdown(phase("decode", kernels=[K("nvjet", "gemm", 20, 800.0), K("fa3", "attention", 20, 200.0)]))
    b = breakdown(phase("decode", kernels=[K("nvjet", "gemm", 20, 700.0), K("fa3", "attention", 20, 300.0)]))
    return write_breakdown(a, tmp_path / "a.json"), write_breakdown(b, tmp_path / "b.json")


def test_cli_exit_codes(pair_files, capsys):
    a, b = map(str, pair_files)
    assert main(["diff", a, b, "--fail-on", "attention.share > +20pp", "-f", "json"]) == 0
    assert main(["diff", a, b, "--fail-on", "attention.share > +2pp", "-f", "json"]) == 1
    err = capsys.readouterr().err
    assert "FAIL decode: attention.share > +2pp" in err and "1 of 1 --fail-on check(s) failed" in err


@pytest.mark.parametrize("expr", ["moe.share >> 2", "moe.share > 2ms", "nonsense"])
def test_cli_bad_expression_is_one_line_and_exit_2(pair_files, capsys, expr):
    a, b = map(str, pair_files)
    assert main(["diff", a, b, "--fail-on", expr]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.count("\n") == 1 and "bad --fail-on" in out.err
    assert out.err.rstrip().endswith("grammar in docs/diff.md)")  # nothing eaten as rich markup
