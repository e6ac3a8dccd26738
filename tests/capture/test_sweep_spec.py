"""Sweep results -> plot specs and slope (pure); what a sweep or capture is asked to do, parsed once for both
engines (in-process and ``--server``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from phaseprof.capture.server.capture import ServerCapture, ServerTarget
from phaseprof.capture.shared.options import CaptureOptions, Phase
from phaseprof.capture.shared.sweep import PrefillPoint, SweepSpec, prefill_plot_spec, slope_us_per_token, write_plot
from phaseprof.capture.shared.timing import summarize
from phaseprof.commands.main import main


def point(n: int, ms: list[float]) -> PrefillPoint:
    s = summarize([v / 1e3 for v in ms])
    return PrefillPoint(prompt_tokens=n, ttft=s, ttft_host=s, source="host_clock")


def test_summarize_percentiles() -> None:
    s = summarize([0.001 * v for v in range(1, 11)])
    assert (s.median_ms, s.min_ms, s.max_ms, s.n) == (5.5, 1.0, 10.0, 10)
    assert round(s.p10_ms, 6) == 1.9 and round(s.p90_ms, 6) == 9.1


def test_prefill_plot_spec_and_slope(tmp_path: Path) -> None:
    pts = [point(128, [68, 70, 72]), point(1024, [75, 77, 79]), point(8192, [200, 206, 212])]
    spec = prefill_plot_spec(pts, title="t")
    trace = spec["data"][0]
    assert trace["x"] == [128, 1024, 8192] and trace["y"] == [70.0, 77.0, 206.0]
    assert [round(v, 3) for v in trace["error_y"]["array"]] == [1.6, 1.6, 4.8]
    assert 16 < slope_us_per_token(pts) < 18  # ~136 ms over ~8K tokens
    assert slope_us_per_token(pts[:1]) is None
    files = write_plot(spec, tmp_path)
    assert files[0] == "plot.json" and (tmp_path / "plot.json").is_file()


# ---- one options type per concern: SweepSpec / CaptureOptions are shared by the in-process and server paths
@pytest.mark.parametrize(("kw", "expected"), [
    ({"phase": Phase.PREFILL, "tokens": None},
     SweepSpec(Phase.PREFILL, lengths=(128, 256, 512, 1024, 2048, 4096, 8192))),
    ({"phase": Phase.PREFILL, "tokens": "64,32", "warmup": -3},
     SweepSpec(Phase.PREFILL, lengths=(32, 64), warmup=0)),
    ({"phase": Phase.DECODE, "tokens": "16", "concurrency": "1:4:1", "output_tokens": 4},
     SweepSpec(Phase.DECODE, concurrency=(1, 2, 3, 4), prompt_tokens=16, output_tokens=4)),
])
def test_sweep_spec_parse(kw: dict, expected: SweepSpec) -> None:
    args = {"concurrency": "1,2", "output_tokens": 128, "reps": 5, "warmup": 1, **kw}
    assert SweepSpec.parse(**args) == expected
    assert expected.request_count() == (expected.warmup + expected.reps) * (
        len(expected.lengths) if expected.phase is Phase.PREFILL else sum(expected.concurrency))


def test_sweep_spec_label_and_requests() -> None:
    assert SweepSpec(Phase.PREFILL, lengths=(128, 8192), reps=2, warmup=1).label == "128-8192"
    d = SweepSpec(Phase.DECODE, concurrency=(1, 16), reps=2, warmup=1)
    assert (d.label, d.request_count()) == ("c1-16", 3 * 17)


BAD_SWEEPS = [
    (["--phase", "decode", "--tokens", "16,32"], "a decode sweep takes one prompt length"),
    (["--phase", "decode", "--output-tokens", "1"], "a decode sweep needs --output-tokens of at least 2"),
    (["--tokens", "128,abc"], "bad --tokens value 'abc'"),
    (["--phase", "decode", "--concurrency", "0"], "--concurrency needs at least one positive integer"),
    (["--reps", "0"], "--reps must be at least 1, got 0"),
]


@pytest.mark.parametrize(("args", "message"), BAD_SWEEPS)
def test_both_engines_refuse_a_bad_sweep_with_the_same_line(args: list[str], message: str,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Refused before any engine starts or any server is contacted (port 9: nothing listens there)."""
    lines = []
    for extra in ([], ["--server", "http://127.0.0.1:9"]):
        assert main(["sweep", *extra, *args]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1
        lines.append(err)
    assert lines[0] == lines[1]


def test_capture_options_of_normalises_once() -> None:
    pre = CaptureOptions.of(Phase.PREFILL, 512, output_tokens=64, reps=3, warmup=-1)
    assert (pre.output_tokens, pre.max_tokens, pre.warmup) == (1, 1, 0)
    dec = CaptureOptions.of(Phase.DECODE, 512, output_tokens=64, reps=3, warmup=2, profile_decode_steps=4)
    assert (dec.output_tokens, dec.max_tokens, dec.warmup, dec.profile_decode_steps) == (64, 64, 2, 4)
    req = ServerCapture(capture=dec, server=ServerTarget("http://127.0.0.1:9"), trace_dir=Path("t"))
    assert req.capture is dec and req.server.timeout_s == 600.0


@pytest.mark.parametrize("args, refused", [
    (["--server", "http://127.0.0.1:9", "--quant", "fp8"], "--quant does not apply with --server"),
    (["--server", "http://127.0.0.1:9", "--model", "tiny-hybrid"], "--model does not apply with --server"),
    (["--server", "http://127.0.0.1:9", "--no-serving-timing"], "--no-serving-timing does not apply with --server"),
    (["--server", "http://127.0.0.1:9", "--engine-arg", "max_num_seqs=4"], "--engine-arg does not apply with"),
    (["--server", "http://127.0.0.1:9", "--phase", "decode", "--profile-steps", "2"],
     "--profile-steps does not apply with --server"),
    (["--request-timeout", "5"], "--request-timeout does not apply in-process"),
    (["--concurrency", "1,2"], "--concurrency does not apply with --phase prefill"),
    (["--output-tokens", "8"], "--output-tokens does not apply with --phase prefill"),
    (["--phase", "decode", "--profile-steps", "2"], "--profile-steps does not apply without --profile-at"),
])
def test_options_the_sweep_does_not_use_are_refused(args: list[str], refused: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """An option the asked-for sweep would ignore is one line and exit 2, before any engine or request."""
    assert main(["sweep", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: " + refused) and "\n" not in err, err
