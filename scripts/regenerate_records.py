#!/usr/bin/env python
"""Bring the breakdowns committed under ``traces/`` up to the current code (one truth in every view).

Every git-tracked ``breakdown.json`` / ``rankN.breakdown.json`` under ``traces/``:

- **its trace kept beside it** (``trace.json.gz`` in the same folder): analysed afresh, as ``phaseprof analyze
  TRACE --json breakdown.json`` writes it (``sol.attach.reported``: the speed of light and the verdicts), with the
  trace's path written relative to the repository (never the recording host's path);
- **no trace kept**: the stored data stays as it is and the sections derived from it are re-derived: ``sol``
  (the GPU's one baseline, ``sol.ceilings.choose_ceiling``) and ``verdicts`` (read off the breakdown and the
  ``sol`` section). Its ``schema_version`` is left as recorded: the kernel and module views cannot be redone
  without the trace.

Every git-tracked served ``sweep.json`` (``sweep --server``: its device is the server's URL) that records no GPU
learns it from the profiled runs of the same server beside it (``pareto.gpu.served_runs``: their run.json names
the device their trace recorded), and says so in ``device.gpu_source``; a PD run's run.json names the GPU its
engines' breakdowns name (``disagg.capture.pd_device``).

Records are written as one line (``scripts/compact_records.py``: ``traces/`` keeps its size budget).

    python scripts/regenerate_records.py             # rewrite what differs, print one line per file
    python scripts/regenerate_records.py --check     # exit 1 when any record differs from the current code
    python scripts/regenerate_records.py PATH...     # only these breakdowns
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: The sections of a stored breakdown derived from the rest of it: re-derived where no trace is kept.
DERIVED = ("sol", "verdicts")


def committed_breakdowns() -> list[Path]:
    names = subprocess.check_output(["git", "ls-files", "traces"], cwd=ROOT, text=True).split()
    return [ROOT / n for n in names if n.endswith("breakdown.json")]


def trace_of(path: Path) -> Path | None:
    """The trace a breakdown was written from, when it is kept beside it (``trace.json.gz``)."""
    t = path.with_name("trace.json.gz")
    return t if path.name == "breakdown.json" and t.is_file() else None


def compact(doc: Any) -> bytes:
    return (json.dumps(doc, separators=(",", ":"), ensure_ascii=False) + "\n").encode()


def fresh(path: Path, trace: Path) -> dict[str, Any]:
    """``phaseprof analyze TRACE`` 's breakdown document, the trace named relative to the repository."""
    from phaseprof.analysis.pipeline import AnalysisConfig, analyze
    from phaseprof.report.json_io import dumps
    from phaseprof.sol.attach import reported

    cwd = Path.cwd()
    os.chdir(ROOT)  # the trace is read by a relative path: the breakdown records that one
    try:
        bd = reported(analyze(trace.relative_to(ROOT), config=AnalysisConfig()))
    finally:
        os.chdir(cwd)
    return json.loads(dumps(bd))


def rederived(path: Path, doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with its ``DERIVED`` sections re-derived from the rest of it (no trace kept)."""
    from phaseprof.report.json_io import dumps, load_breakdown
    from phaseprof.sol.attach import attach_sol

    new = json.loads(dumps(attach_sol(load_breakdown(path), source=path.parent)))
    return {**doc, **{k: new[k] for k in DERIVED if k in doc}}


def regenerated(path: Path) -> dict[str, Any]:
    """The document the current code writes for this committed breakdown."""
    doc = json.loads(path.read_bytes())
    trace = trace_of(path)
    if trace is not None:
        return fresh(path, trace)
    if not any(k in doc for k in DERIVED):
        return doc  # an old record without derived sections: nothing to re-derive, nothing to analyse
    return rederived(path, doc)


def committed_sweeps() -> list[Path]:
    names = subprocess.check_output(["git", "ls-files", "traces"], cwd=ROOT, text=True).split()
    return [ROOT / n for n in names if n.endswith("sweep.json")]


def sweep_with_gpu(path: Path) -> dict[str, Any]:
    """A served sweep's document with ``device.gpu`` / ``gpu_source`` learned from its server's profiled runs;
    any other sweep as it is."""
    from phaseprof.pareto.gpu import from_profiled, served_runs
    from phaseprof.records import SweepRecord

    doc = json.loads(path.read_bytes())
    rec = SweepRecord.read(path)
    if rec.device.kind != "server" or rec.device.gpu:
        return doc
    runs = served_runs(path.parent, rec)
    got = from_profiled(runs)
    if got.name is None:
        return doc
    base = Path(os.path.commonpath([path.parent, *runs]))
    names = ", ".join(r.relative_to(base).as_posix() for r in runs)
    source = (f"the traces of {len(runs)} profiled runs of this server ({base.relative_to(ROOT / 'traces')}: "
              f"{names}), added by scripts/regenerate_records.py")
    return {**doc, "device": {**doc["device"], "gpu": got.name, "gpu_source": source}}


def committed_pd_runs() -> list[Path]:
    names = subprocess.check_output(["git", "ls-files", "traces"], cwd=ROOT, text=True).split()
    runs = [ROOT / n for n in names if n.endswith("run.json")]
    return [p for p in runs if json.loads(p.read_bytes()).get("kind") == "pd"]


def pd_with_device(path: Path) -> dict[str, Any]:
    """A PD run.json with the GPU its engines' breakdowns name (``disagg.capture.pd_device``), as a capture now
    records it; left as it is when it names one, or when no breakdown was kept."""
    from phaseprof.disagg.capture import pd_device
    from phaseprof.report.json_io import load_breakdown

    doc = json.loads(path.read_bytes())
    if (doc.get("device") or {}).get("name"):
        return doc
    sides = [path.parent / s["breakdown"] for s in (doc["disagg"]["prefill"], doc["disagg"]["decode"])
             if s.get("breakdown") and (path.parent / s["breakdown"]).is_file()]
    device = pd_device(*(load_breakdown(p) for p in sides), *([None] * (2 - len(sides))))
    if not device.name:
        return doc
    return {**doc, "device": {**(doc.get("device") or {}), "kind": device.kind, "name": device.name}}


def main(argv: list[str]) -> int:
    check = "--check" in argv
    given = [Path(a).resolve() for a in argv if not a.startswith("--")]
    paths = [p for p in given if p.name.endswith("breakdown.json")] if given else committed_breakdowns()
    sweeps = [p for p in given if p.name == "sweep.json"] if given else committed_sweeps()
    stale = []
    for path in paths:
        old = json.loads(path.read_bytes())
        new = regenerated(path)
        rel = path.relative_to(ROOT)
        if new == old:
            print(f"current   {rel}")
            continue
        stale.append(rel)
        how = "analysed" if trace_of(path) else "re-derived"
        changed = ", ".join(k for k in new if new.get(k) != old.get(k))
        print(f"{'stale' if check else 'rewrote'}     {rel} ({how}: {changed})")
        if not check:
            path.write_bytes(compact(new))
    for path in sweeps:
        old, new = json.loads(path.read_bytes()), sweep_with_gpu(path)
        if new == old:
            continue
        rel = path.relative_to(ROOT)
        stale.append(rel)
        print(f"{'stale' if check else 'rewrote'}     {rel} (device.gpu: {new['device']['gpu']})")
        if not check:
            path.write_bytes(compact(new))
    runs = committed_pd_runs() if not given else []
    for path in runs:
        old, new = json.loads(path.read_bytes()), pd_with_device(path)
        if new != old:
            rel = path.relative_to(ROOT)
            stale.append(rel)
            print(f"{'stale' if check else 'rewrote'}     {rel} (device: {new['device']['name']})")
            if not check:
                path.write_bytes(compact(new))
    print(f"{len(stale)} of {len(paths) + len(sweeps) + len(runs)} record(s) "
          f"{'behind the code' if check else 'rewritten'}")
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
