"""Which GPU a sweep ran on, and where that came from.

An in-process sweep records its CUDA device. A served sweep (``sweep --server``) talks to a URL: the GPU behind
it is learned, first found: a name stated by the user (``pareto --gpu``); the record's own ``device.gpu`` (with its
``gpu_source``); the device name of the profiled runs matched to its points (their traces name the GPU). The
speed of light needs the GPU: without one it says so, naming what was tried.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from phaseprof.errors import PhaseprofError
from phaseprof.gpu_names import gpu_key
from phaseprof.records import RunDir, RunRecord, SweepRecord

#: ``gpu_source`` of a name given on the command line.
STATED = "stated (--gpu)"


@dataclass(frozen=True)
class SweepGpu:
    """``name``: the GPU's device name (as a trace records it), None when unknown; ``source``: where it came from,
    or why there is none."""

    name: str | None
    source: str


def recorded(rec: SweepRecord) -> SweepGpu:
    """What the sweep record says: its CUDA device, or a server's learned ``device.gpu``."""
    d = rec.device
    if d.kind == "cuda" and d.name:
        return SweepGpu(d.name, "the sweep's CUDA device")
    if d.gpu:
        return SweepGpu(d.gpu, d.gpu_source or "recorded in sweep.json")
    return SweepGpu(None, f"the sweep records {d.kind or 'a'} device {d.name!r}, not its GPU")


def from_profiled(runs: Iterable[Path]) -> SweepGpu:
    """The GPU the profiled runs' traces name (run.json ``device``, written from the trace): one name, or an
    error when they disagree (the runs would not be of one server)."""
    names: dict[str, list[str]] = {}
    for r in runs:
        run = RunDir(Path(r))
        if not run.has_record:
            continue
        gpu = run.record.device.gpu_name
        if gpu:
            names.setdefault(gpu_key(gpu), []).append(gpu)
    if not names:
        return SweepGpu(None, "no profiled run names its GPU")
    if len(names) > 1:
        raise PhaseprofError("the profiled runs name different GPUs: "
                             + ", ".join(sorted({v[0] for v in names.values()})))
    (found,) = names.values()
    return SweepGpu(found[0], f"the trace of {len(found)} profiled run(s) of this sweep")


def sweep_gpu(rec: SweepRecord, *, stated: str | None = None, profiled: Iterable[Path] = ()) -> SweepGpu:
    """The sweep's GPU, first found: ``stated``, the record's, the ``profiled`` runs' traces."""
    if stated:
        return SweepGpu(stated, STATED)
    got = recorded(rec)
    if got.name:
        return got
    runs = list(profiled)
    if runs:
        learned = from_profiled(runs)
        if learned.name:
            return learned
    return SweepGpu(None, got.source + ("; no profiled run names one" if runs else
                                       "; no profiled run matched (pass --gpu NAME or --profiled RUN)"))


def served_runs(sweep_dir: Path, rec: SweepRecord, *, levels: int = 2) -> list[Path]:
    """Run directories of the same server as a served sweep, in its folder or the folder above (``levels``):
    the same URL and model in their run.json, with a CUDA device (profiled runs name the GPU their trace
    recorded). The first folder that holds any wins. For recording a sweep's GPU after the fact
    (``scripts/regenerate_records.py``)."""
    url, model = rec.device.name, rec.model.name
    if rec.device.kind != "server" or not url:
        return []
    for d in [sweep_dir.parent, *sweep_dir.parent.parents][:levels]:
        found = []
        for f in sorted(d.rglob(RunDir.RECORD)):
            r = RunRecord.read(f)
            if r.server is not None and r.server.url == url and r.model.name == model and r.device.kind == "cuda":
                found.append(f.parent)
        if found:
            return found
    return []
