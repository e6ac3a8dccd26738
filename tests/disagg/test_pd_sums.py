"""A PD run's TTFT printed as a sum adds up in every view (terminal, markdown, JSON; the
dashboard prints the same ``summary_lines``, checked in ``tests/dashboard/test_pd_page.py``).

On the committed runs (``traces/h200/pd``) the old headline took each part as the median of its own column, from
different requests: "TTFT 748.17 ms = prefill 179.66 ms + handoff 547.59 ms" (727.25). Now the parts are those
of the median request, and the means are printed beside them."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import pytest

from phaseprof.commands.main import main
from phaseprof.disagg.records import read_handoff
from phaseprof.disagg.render import summary_lines, timeline_lines
from phaseprof.disagg.run import read_pd_run

PD = Path(__file__).resolve().parents[2] / "traces/h200/pd"
RUNS = sorted(p for p in PD.iterdir() if (p / "handoff.json").is_file())
NUM = r"([\d,]+\.\d\d)"


def _f(s: str) -> float:
    return float(s.replace(",", ""))


def _sums(text: str) -> list[tuple[float, list[float]]]:
    """Every printed "TTFT X ms = prefill A ... + handoff B" (one line or two) as (X, [A, B])."""
    flat = " ".join(text.split())
    found = re.findall(rf"TTFT {NUM} ms = prefill {NUM}(?: ms)? \+ handoff (?:to the first token )?{NUM}", flat)
    return [(_f(t), [_f(p), _f(h)]) for t, p, h in found]


def test_three_committed_pd_runs() -> None:
    assert len(RUNS) == 3


@pytest.mark.parametrize("run", RUNS, ids=lambda p: p.name)
def test_the_centre_is_one_request(run: Path) -> None:
    h = read_handoff(run / "handoff.json")
    timed = [r for r in h.requests if not r.profiled]
    mid = next(r for r in timed if r.index == h.median.request)
    assert h.median.ttft_ms == statistics.median(r.ttft_ms for r in timed) == mid.ttft_ms  # 5 requests: odd
    assert (h.median.prefill_ms, h.median.handoff_ms) == (mid.prefill_ms, mid.handoff_ms)
    assert h.median.prefill_ms + h.median.handoff_ms == pytest.approx(h.median.ttft_ms, abs=1e-9)
    assert h.median.mean_ttft_ms == pytest.approx(h.median.mean_prefill_ms + h.median.mean_handoff_ms, abs=1e-9)


def test_the_4096_headline_is_request_1() -> None:
    lines = summary_lines(read_handoff(RUNS[1] / "handoff.json"))
    assert "median of 5 timed requests by TTFT (request #1): TTFT 748.17 ms" in lines
    assert "  = prefill 206.62 ms + handoff to the first token 541.55 ms" in lines


@pytest.mark.parametrize("run", RUNS, ids=lambda p: p.name)
def test_every_printed_ttft_adds_up(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pd = read_pd_run(run)
    lines = "\n".join(summary_lines(pd.handoff) + timeline_lines(pd.timeline, pd.timeline_note))
    for fmt in ("table", "markdown"):
        assert main(["analyze", str(run), "-f", fmt]) == 0
        out = capsys.readouterr().out
        sums = _sums(out)
        assert len(sums) == 2 and sums == _sums(lines), fmt  # the median request and the means
        assert all(round(sum(parts), 2) == total for total, parts in sums), sums
        rows = re.findall(rf"│ (\d) │ (?:yes)? *│ +{NUM} │ +{NUM} │ +{NUM} │", out)
        assert fmt != "table" or len(rows) == 6
        assert all(round(_f(p) + _f(h), 2) == _f(t) for _, p, h, t in rows)
        if pd.timeline is not None:  # TTFT = prefill step + NIXL + decode's first step + rest
            m = re.search(rf"TTFT {NUM} ms =\n.*?{NUM} ms.*\n.*?{NUM} ms\n.*?{NUM} ms.*\n.*?{NUM} ms", out)
            assert m is not None
            total, *parts = map(_f, m.groups())
            assert round(sum(parts), 2) == total == round(pd.timeline.ttft_ms, 2)
    assert main(["analyze", str(run), "-f", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    m = doc["median"]
    assert doc["schema_version"] == 2 and m["prefill_ms"] + m["handoff_ms"] == pytest.approx(m["ttft_ms"])
    assert m["ttft_ms"] == pd.handoff.median.ttft_ms and m["request"] == pd.handoff.median.request


@pytest.mark.parametrize("run", RUNS, ids=lambda p: p.name)
def test_committed_records_store_the_centre_the_code_derives(run: Path) -> None:
    import msgspec

    stored = json.loads((run / "handoff.json").read_text())
    assert stored["schema_version"] == 2
    assert stored["median"] == msgspec.to_builtins(read_handoff(run / "handoff.json").median)
