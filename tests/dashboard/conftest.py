"""Fixtures for the dashboard tests: a runs directory made of the repo's real (cut) traces, and AppTest helpers.

The runs directory holds every trace of traces/public-cut/ as a loose file, one run directory in the layout
``phaseprof capture`` writes (trace.json.gz + breakdown.json + run.json), a sweep.json, and a broken trace.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import PUBLIC_CUT_DIR, REPO

APP = REPO / "phaseprof" / "dashboard" / "app.py"
H100_DECODE = "h100_vllm_llama70b_tp4_decode_2steps.json.gz"
B200_PREFILL = "b200_vllm_gptoss120b_eager_prefill_window.json.gz"
RUN_NAME = "20261130T083500Z-h100-llama-70b-decode-128in-2out"
BROKEN = "broken.json.gz"
#: The public H100 and B200 traces the Compare page must show against each other (different models).
PUBLIC_H100 = "traceMap__1_h100_1000isl_10osl_32con.pt.trace.json.gz"
PUBLIC_B200 = "TraceLens__b200__eager_trace.json.gz"

#: run.json as ``phaseprof capture`` writes it (phaseprof/capture/runner.py), trimmed to what the dashboard reads.
RUN_JSON: dict[str, Any] = {
    "schema_version": 1, "kind": "capture", "created_utc": "2026-11-30T08:35:00+00:00",
    "device": {"kind": "cuda", "name": "NVIDIA H100 80GB HBM3", "memory_bytes": 85520809984, "slug": "h100"},
    "model": {"name": "llama-70b", "kind": "preset"},
    "engine": {"kwargs": {"enforce_eager": False}},
    "request": {"phase": "decode", "prompt_tokens": 128, "max_tokens": 2, "concurrency": 1},
    "ttft_ms": 41.5, "tpot_ms": 29.75,  # the clean medians, top level (RunRecord.ttft_ms / tpot_ms)
    "timing": {"phase": "decode", "prompt_tokens": 128, "output_tokens": 2,
               "ttft": {"median_ms": 41.5, "p10_ms": 41.0, "p90_ms": 42.25},
               "tpot": {"median_ms": 29.75, "p10_ms": 29.5, "p90_ms": 30.0}},
}
#: Sweeps as ``phaseprof sweep`` writes them (phaseprof/capture/sweep_dir.py), trimmed: clean TTFT / TPOT in ms.
SWEEP_JSON: dict[str, Any] = {
    "kind": "sweep", "phase": "prefill", "model": {"name": "llama-70b"}, "device": {"name": "NVIDIA H100 80GB HBM3"},
    "engine": {"mode": "eager"}, "slope_us_per_token": 17.5,
    "points": [{"prompt_tokens": n, "ttft": {"median_ms": m, "p10_ms": m - 1, "p90_ms": m + 2}, "source": "host_clock"}
               for n, m in ((128, 68.0), (1024, 80.5), (4096, 141.0), (8192, 206.0))],
}
DECODE_SWEEP_JSON: dict[str, Any] = {
    "kind": "sweep", "phase": "decode", "model": {"name": "llama-70b"}, "device": {"name": "NVIDIA H100 80GB HBM3"},
    "engine": {"mode": "graph"},
    "points": [{"concurrency": c, "prompt_tokens": 128, "output_tokens": 32,
                "tpot": {"median_ms": t, "p10_ms": t - 0.1, "p90_ms": t + 0.2},
                "output_tok_per_s": {"median": c * 1000 / t, "p10": 0.0, "p90": 0.0}, "decode_tok_per_s": 0.0,
                "source": "host_clock"} for c, t in ((1, 5.0), (4, 5.25), (16, 6.0))],
}


def _build_runs(root: Path) -> Path:
    from phaseprof.analysis.pipeline import analyze_trace
    from phaseprof.report.json_io import write_breakdown

    if not PUBLIC_CUT_DIR.is_dir():
        pytest.skip(f"committed trace fixtures missing: {PUBLIC_CUT_DIR}")
    for f in sorted(PUBLIC_CUT_DIR.glob("*.json.gz")):
        shutil.copy(f, root / f.name)
    run = root / RUN_NAME
    run.mkdir()
    shutil.copy(PUBLIC_CUT_DIR / H100_DECODE, run / "trace.json.gz")
    write_breakdown(analyze_trace(run / "trace.json.gz"), run / "breakdown.json")
    (run / "run.json").write_text(json.dumps(RUN_JSON))
    for name, doc in (("sweep-prefill", SWEEP_JSON), ("sweep-decode", DECODE_SWEEP_JSON)):
        (root / name).mkdir()
        (root / name / "sweep.json").write_text(json.dumps(doc))
        (root / name / "plot.json").write_text("{}")  # the sweep's plot spec: not a trace
    (root / BROKEN).write_bytes(gzip.compress(b'{"traceEvents": [{"ph": "X", "name": "k", "ts": 1,'))
    return root.resolve()


@pytest.fixture(scope="session")
def runs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build_runs(tmp_path_factory.mktemp("runs"))


@pytest.fixture()
def make_app(runs_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """``make_app(page, runs=..., **query)`` -> an AppTest of the dashboard, not yet run."""
    from streamlit.testing.v1 import AppTest

    def make(page: str, *, runs: Path | None = None, **query: str) -> AppTest:
        monkeypatch.setenv("PHASEPROF_RUNS_DIR", str(runs or runs_dir))
        monkeypatch.setenv("PHASEPROF_UPLOAD_DIR", str(tmp_path / "uploads"))
        monkeypatch.setenv("PHASEPROF_MAX_UPLOAD_MB", "5")
        at = AppTest.from_file(str(APP), default_timeout=180)
        at.query_params["page"] = page
        for k, v in query.items():
            at.query_params[k] = v
        return at

    return make


def shown(markdown: str) -> str:
    """What a markdown string shows: backslash escapes and the invisible WORD JOINERs that break autolinks
    dropped (the dashboard escapes every name it prints)."""
    return re.sub(r"\\(.)", r"\1", markdown).replace("\u2060", "")


def ok(at: Any) -> Any:
    """Assert the page ran without an exception element or error box; return it for chaining."""
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    return at


def frame(at: Any, *columns: str) -> Any:
    """The first table shown whose columns include all of ``columns`` (tables have no id unless selectable)."""
    for d in at.dataframe:
        df = d.value
        if all(c in df.columns for c in columns):
            return df
    raise AssertionError(f"no table with columns {columns}: {[list(d.value.columns) for d in at.dataframe]}")


def figure(at: Any, key: str) -> dict[str, Any]:
    """The plotly figure (JSON spec) of the chart with this key."""
    charts = [c for c in at.get("plotly_chart") if key in getattr(c.proto, "id", "")]
    assert charts, f"no chart {key!r}"
    return json.loads(charts[0].proto.spec)
