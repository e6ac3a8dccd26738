"""A runs directory in which every string of a breakdown, a trace and a run record is hostile.

Real recordings, mutated: the committed H200 eager 4K prefill captured with ``--hierarchy hooks`` (breakdown with
attribution and per-layer times, run.json; its speed-of-light section computed by phaseprof and stored in it),
the committed H200 graph decode run, the public H100 decode trace (for the Timeline) and the committed prefill
sweep. Every string value becomes ``hostile(original)`` (the payload, then the original, so names stay distinct
and the same name stays the same everywhere), and so does every key of the maps keyed by data (buckets,
attribution methods, launch APIs), never the structural ones.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import shutil
from pathlib import Path
from typing import Any

from tests.conftest import PUBLIC_CUT_DIR, REPO

#: Everything a name could try: plotly pseudo-HTML (a styled span that fetches a URL when drawn, bold, italic, a
#: link, a line break), markdown (a link, an image, strong, a code span), GFM autolinks (a URL, www., an e-mail
#: address) and Streamlit's markdown extras (LaTeX, a colour directive). Each live part carries a PAY* word, so a
#: test can tell an element the payload made from one the dashboard made around it.
PAYLOAD = ('<span style="cursor:url(http://127.0.0.1:9/beacon.png),auto">PAYSPAN</span> <b>PAYBOLD</b> '
           '<i>PAYITALIC</i> <a href="http://127.0.0.1:9/a">PAYANCHOR</a> <BR>PAYBREAK <img src=x onerror=alert(1)> '
           '[PAYLINK](http://127.0.0.1:9/l) ![PAYIMAGE](http://127.0.0.1:9/i.png) **PAYSTRONG** `PAYCODE` '
           'http://127.0.0.1:9/PAYURL www.payweb.example pay@paymail.example $PAYTEX$ :red[PAYRED]')
#: The PAY* words of the parts that must never become live.
MARKERS = ("PAYSPAN", "PAYBOLD", "PAYITALIC", "PAYANCHOR", "PAYBREAK", "PAYLINK", "PAYIMAGE", "PAYSTRONG",
           "PAYCODE", "PAYURL", "payweb", "paymail", "PAYTEX", "PAYRED")
#: Fields that stay as recorded: format versions (a reader refuses others), the SOL status, which says
#: whether the section has numbers at all ("ok"), and the trace reader (schema 1.5: native | python, an enum a
#: reader refuses otherwise, in one line).
KEEP = frozenset({"schema_version", "version", "status", "reader"})
#: Maps keyed by data (a bucket, an attribution method, a launch API, a phase): their keys are names too.
DATA_MAPS = frozenset({"top_kernels", "by_bucket_us", "coverage_pct", "coverage_us", "by_api"})

H200 = REPO / "traces" / "h200"
HOOKS_PREFILL = H200 / "hooks" / "eager-prefill-4096"
GRAPH_DECODE = H200 / "graph" / "20261130T094743Z-h200-qwen3.5-35b-a3b-decode-128in-32out"
PREFILL_SWEEP = H200 / "eager" / "20261130T094816Z-h200-qwen3.5-35b-a3b-sweep-prefill-128-8192" / "sweep.json"
PUBLIC_DECODE = PUBLIC_CUT_DIR / "h100_vllm_llama70b_tp4_decode_2steps.json.gz"
#: Run directory and file names carry what of the payload a file name can (no "/", so no closing tag).
RUN_A = "A <b>PAYBOLD [PAYLINK](x) www.payweb.example $PAYTEX$"
RUN_B = "B <i>PAYITALIC pay@paymail.example"
TRACE = "T <b>PAYBOLD www.payweb.example.json.gz"
#: A disaggregated (PD) run: the committed 4,096-token one.
PD_RUN = "P <b>PAYBOLD [PAYLINK](x) pay@paymail.example $PAYTEX$"
PD_SOURCE = H200 / "pd" / "qwen3.5-35b-a3b-fp8-eager-4096in-32out"
#: What a PD run's records keep: what it is (kind), the files it names (relative paths) and the phases (so the
#: profiled request's timeline is still laid out).
PD_KEEP = KEEP | {"kind", "breakdown", "handoff", "trace", "phase"}


def hostile(s: str) -> str:
    return f"{PAYLOAD} {s}"


def poison(v: Any, key: str = "", keep: frozenset[str] = KEEP) -> Any:
    """``v`` with every string value (but those under a key in ``keep``) and every data-map key made hostile."""
    if isinstance(v, str):
        return v if key in keep else hostile(v)
    if isinstance(v, dict):
        return {(hostile(k) if key in DATA_MAPS else k): poison(x, k, keep) for k, x in v.items()}
    if isinstance(v, list):
        return [poison(x, key, keep) for x in v]
    return v


def _breakdown_with_sol(run: Path) -> dict[str, Any]:
    from phaseprof.report.json_io import dumps, load_breakdown
    from phaseprof.sol.attach import sol_of

    bd = load_breakdown(run / "breakdown.json")
    if bd.sol is None:
        sol = sol_of(bd, source=str(run / "breakdown.json"))
        assert sol.ok, sol.status  # the roofline needs numbers: the fixture must have them
        bd = dataclasses.replace(bd, sol=sol)
    return json.loads(dumps(bd))


def _run_dir(dest: Path, run: Path) -> None:
    dest.mkdir(parents=True)
    (dest / "breakdown.json").write_text(json.dumps(poison(_breakdown_with_sol(run))))
    (dest / "run.json").write_text(json.dumps(poison(json.loads((run / "run.json").read_text()))))


def _trace(dest: Path, src: Path) -> None:
    """The trace with every device property, every event's name and every string argument hostile, except
    the step markers' names (vLLM's ``execute_model`` scopes: without them there is no step to draw)."""
    doc = json.loads(gzip.decompress(src.read_bytes()))
    doc["deviceProperties"] = poison(doc.get("deviceProperties", []))
    for e in doc["traceEvents"]:
        if isinstance(e.get("name"), str) and e.get("cat") != "user_annotation" and "execute" not in e["name"]:
            e["name"] = hostile(e["name"])
        if isinstance(e.get("args"), dict):
            e["args"] = {k: poison(x, k) if isinstance(x, str) else x for k, x in e["args"].items()}
    dest.write_bytes(gzip.compress(json.dumps(doc).encode()))


def _pd_run(dest: Path, src: Path) -> None:
    """The PD run with every string of its run.json, handoff.json and both breakdowns hostile (but ``PD_KEEP``)."""
    for rel in ("run.json", "handoff.json", "prefill/breakdown.json", "decode/breakdown.json"):
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_text(json.dumps(poison(json.loads((src / rel).read_text()), keep=PD_KEEP)))


def build(root: Path) -> Path:
    """The hostile runs directory under ``root``: two run directories, a trace, a sweep, a PD run."""
    _run_dir(root / RUN_A, HOOKS_PREFILL)
    _run_dir(root / RUN_B, GRAPH_DECODE)
    _trace(root / TRACE, PUBLIC_DECODE)
    _pd_run(root / PD_RUN, PD_SOURCE)
    (root / "sweep <b>PAYBOLD").mkdir()
    sweep = poison(json.loads(PREFILL_SWEEP.read_text()), keep=KEEP | {"kind", "phase"})  # what it is: kept
    (root / "sweep <b>PAYBOLD" / "sweep.json").write_text(json.dumps(sweep))
    return root.resolve()


def copy_to(root: Path, built: Path) -> Path:
    shutil.copytree(built, root)
    return root
