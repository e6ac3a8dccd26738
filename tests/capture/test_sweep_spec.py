"""Sweep results -> plot specs and slope (pure)."""

from __future__ import annotations

from pathlib import Path

from phaseprof.capture.sweep import PrefillPoint, prefill_plot_spec, slope_us_per_token, write_plot
from phaseprof.capture.timing import summarize


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
