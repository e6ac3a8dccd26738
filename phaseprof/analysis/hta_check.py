"""``phaseprof analyze --cross-check hta``: HTA's kernel totals beside phaseprof's, for the same trace.

Holistic Trace Analysis (HTA 0.5.0, the ``hta`` extra) is run on the trace as its users run it:
``TraceAnalysis(trace_dir=...)`` on a temporary directory holding a link to the trace, then
``get_gpu_kernel_breakdown()``. Both sides are compared on equal terms:

- **time** = the plain *sum of durations* per kernel name (HTA's ``sum (us)``), not phaseprof's attributed
  time (which splits stream overlaps so buckets add up to GPU busy time);
- **kinds** = HTA's own kernel types (``COMPUTATION``, ``COMMUNICATION``, ``MEMORY`` = memcpy/memset, ``OTHER``),
  applied to phaseprof's names with HTA's function, so both sides group the same names together;
- HTA rounds nanosecond timestamps down to whole microseconds unless ``HTA_DISABLE_NS_ROUNDING=1``
  (that loses about a third of the kernel time of a vLLM decode trace), so it is set for the run;
- ``include_last_profiler_step=True``: by default HTA drops the work of the last ``ProfilerStep``.

HTA 0.5.0 is not called for its temporal breakdown (it asserts on decode traces), and it fails on some ROCm
traces under pandas 3 (correlation ids squeezed into int16); a failure becomes ``problem`` (one line), not
a traceback. Analysis returns data; ``print_cross_check`` renders it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from phaseprof.analysis.results import Breakdown

#: Agreement tolerance on total kernel time (percent of HTA's total). Counts must match exactly.
TIME_TOLERANCE_PCT = 0.5
#: Kernel names shown in the printed table (all are in the result).
SHOWN_NAMES = 15
_NON_KERNEL_TYPES = frozenset({"MEMORY"})
_KNOWN_FAILURES = (
    ("int16", "HTA 0.5.0 under pandas>=3 squeezes correlation ids into int16 on this trace; "
              "use pandas<3 for the cross-check"),
    ("correlation", "HTA 0.5.0 could not join kernels to their launches (correlation ids); "
                    "with pandas>=3 this is a known HTA bug on ROCm traces"),
)


@dataclass(frozen=True)
class KernelTotals:
    """Count and summed duration (us) of one kernel name or HTA kernel type, on each side."""

    key: str
    bucket: str  # phaseprof kernel-view bucket of a name row ("" for type rows or when not known)
    hta_count: int
    hta_time_us: float
    phaseprof_count: int
    phaseprof_time_us: float

    @property
    def time_diff_pct(self) -> float:
        """phaseprof minus HTA, percent of HTA's time (0 when both are 0)."""
        if self.hta_time_us == 0:
            return 0.0 if self.phaseprof_time_us == 0 else float("inf")
        return 100.0 * (self.phaseprof_time_us - self.hta_time_us) / self.hta_time_us


@dataclass(frozen=True)
class HtaCrossCheck:
    """phaseprof vs HTA on one trace. ``problem`` is set (and the tables empty) when HTA could not run.

    ``kernels``: every GPU kernel (all HTA types but MEMORY); ``memory``: memcpy + memset activities;
    ``hta_busy_us`` / ``phaseprof_busy_us``: union of the intervals HTA's kernel-type breakdown covers
    (computation, communication, memory) vs phaseprof's whole-trace GPU busy time.
    """

    trace: str
    hta_version: str | None
    problem: str | None
    kernels: KernelTotals | None = None
    memory: KernelTotals | None = None
    by_type: tuple[KernelTotals, ...] = ()
    by_name: tuple[KernelTotals, ...] = ()
    hta_busy_us: float | None = None
    phaseprof_busy_us: float | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def agree(self) -> bool:
        """Kernel counts equal and total kernel time within ``TIME_TOLERANCE_PCT``."""
        k = self.kernels
        return (self.problem is None and k is not None and k.hta_count == k.phaseprof_count
                and abs(k.time_diff_pct) <= TIME_TOLERANCE_PCT)


@contextlib.contextmanager
def _hta_environment() -> Iterator[None]:
    """Set HTA's no-rounding flag and keep its logging config from taking over the process.

    Importing HTA runs ``logging.config.fileConfig``, which sets the root logger to INFO on stdout and
    disables every logger created before; both are restored afterwards.
    """
    root = logging.getLogger()
    saved_root = (root.level, list(root.handlers))
    saved_disabled = {name: lg.disabled for name, lg in logging.Logger.manager.loggerDict.items()
                      if isinstance(lg, logging.Logger)}
    old_env = os.environ.get("HTA_DISABLE_NS_ROUNDING")
    os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"
    try:
        yield
    finally:
        if old_env is None:
            os.environ.pop("HTA_DISABLE_NS_ROUNDING", None)
        else:
            os.environ["HTA_DISABLE_NS_ROUNDING"] = old_env
        root.setLevel(saved_root[0])
        root.handlers[:] = saved_root[1]
        for name, disabled in saved_disabled.items():
            lg = logging.Logger.manager.loggerDict.get(name)
            if isinstance(lg, logging.Logger):
                lg.disabled = disabled


def _hta_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("HolisticTraceAnalysis")
    except PackageNotFoundError:
        return None


def _explain(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".replace("\n", " ")
    for needle, why in _KNOWN_FAILURES:
        if needle in text and int(pd.__version__.split(".")[0]) >= 3:
            return f"HTA failed ({text[:160]}); {why}"
    return f"HTA failed ({text[:200]})"


def run_hta(trace_path: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """HTA's view of the trace: (per-name rows ``name, kernel_type, count, sum_us``, kernel-type table).

    Per-name sums are HTA's ``get_gpu_kernel_breakdown`` figures (nothing folded into "others"); counts come
    from the same parsed trace HTA summed (the breakdown has no count column). Raises whatever HTA raises.
    """
    src = Path(trace_path).resolve()
    suffix = ".json.gz" if src.name.endswith(".gz") else ".json"
    with _hta_environment(), tempfile.TemporaryDirectory(prefix="phaseprof-hta-") as tmp:
        os.symlink(src, Path(tmp) / f"rank-0{suffix}")
        from hta.configs.config import logger as hta_logger
        from hta.trace_analysis import TraceAnalysis
        from hta.utils.utils import get_kernel_type

        hta_logger.setLevel(logging.ERROR)
        analyzer = TraceAnalysis(trace_dir=tmp, include_last_profiler_step=True)
        type_df, kernel_df = analyzer.get_gpu_kernel_breakdown(
            visualize=False, num_kernels=1 << 30, duration_ratio=1.0, include_memory_kernels=True)
        trace_df = next(iter(analyzer.t.traces.values()))
        sym = analyzer.t.symbol_table.get_sym_table()
    gpu = trace_df[trace_df["stream"].ne(-1)]  # the rows get_gpu_kernel_breakdown works on
    names = pd.Series([sym[i] for i in gpu["name"].to_numpy()], dtype=object)
    per = pd.DataFrame({"name": names, "dur": gpu["dur"].to_numpy(dtype=np.float64)}).groupby("name")["dur"]
    rows = pd.DataFrame({"count": per.size(), "own_sum_us": per.sum()}).reset_index()
    rows["kernel_type"] = [get_kernel_type(n) for n in rows["name"]]
    sums = kernel_df.groupby("name")["sum (us)"].sum()
    # Kernels of type OTHER are not in HTA's breakdown: their sum comes from the parsed trace directly.
    rows["sum_us"] = rows["name"].map(sums).fillna(rows["own_sum_us"]).astype(np.float64)
    return rows[["name", "kernel_type", "count", "sum_us"]], type_df


def _phaseprof_rows(trace_path: str | Path) -> pd.DataFrame:
    """phaseprof's raw (not attributed) per-name count and summed duration of GPU activities, in us."""
    from hta.utils.utils import get_kernel_type

    from phaseprof.trace.tables import load_tables

    gpu = load_tables(trace_path).gpu
    g = pd.DataFrame({"name": gpu["name"].astype(str).to_numpy(), "dur": gpu["dur_ns"].to_numpy() / 1000.0})
    per = g.groupby("name")["dur"]
    rows = pd.DataFrame({"count": per.size(), "sum_us": per.sum()}).reset_index()
    rows["kernel_type"] = [get_kernel_type(n) for n in rows["name"]]
    return rows


def _buckets(bd: Breakdown, names: list[str]) -> dict[str, str]:
    """Kernel-view bucket per name: from the breakdown where it lists the name, else the default rules."""
    from phaseprof.classify.classifier import classify_kernels
    from phaseprof.classify.rules import load_rules

    known = {k.name: k.bucket for ph in bd.phases for ks in ph.top_kernels.values() for k in ks}
    known.update({k.name: k.bucket for k in bd.unknown_kernels})
    rest = [n for n in names if n not in known]
    if rest:
        known.update(zip(rest, (str(b) for b in classify_kernels(rest, load_rules()))))
    return known


def _totals(key: str, h: pd.DataFrame, p: pd.DataFrame, bucket: str = "") -> KernelTotals:
    return KernelTotals(key, bucket, int(h["count"].sum()), float(h["sum_us"].sum()),
                        int(p["count"].sum()), float(p["sum_us"].sum()))


def compare(hta_rows: pd.DataFrame, pp_rows: pd.DataFrame, *, trace: str, breakdown: Breakdown,
            hta_type_df: pd.DataFrame | None = None, hta_version: str | None = None) -> HtaCrossCheck:
    """Line HTA's per-name rows up with phaseprof's. Pure: no HTA call, no file access."""
    m = hta_rows.merge(pp_rows, on="name", how="outer", suffixes=("_hta", "_pp"))
    m["kernel_type"] = m["kernel_type_hta"].fillna(m["kernel_type_pp"])
    for c in ("count_hta", "count_pp", "sum_us_hta", "sum_us_pp"):
        m[c] = m[c].fillna(0)
    buckets = _buckets(breakdown, m["name"].tolist())
    m = m.sort_values("sum_us_pp", ascending=False, kind="stable")
    by_name = tuple(KernelTotals(str(r.name), buckets.get(r.name, ""), int(r.count_hta), float(r.sum_us_hta),
                                 int(r.count_pp), float(r.sum_us_pp)) for r in m.itertuples(index=False))
    by_type = tuple(
        KernelTotals(str(t), "", int(g["count_hta"].sum()), float(g["sum_us_hta"].sum()),
                     int(g["count_pp"].sum()), float(g["sum_us_pp"].sum()))
        for t, g in m.groupby("kernel_type", sort=True))
    is_mem = m["kernel_type"].isin(_NON_KERNEL_TYPES)

    def side(df: pd.DataFrame, suffix: str) -> pd.DataFrame:
        return pd.DataFrame({"count": df[f"count{suffix}"], "sum_us": df[f"sum_us{suffix}"]})

    kernels = _totals("kernels", side(m[~is_mem], "_hta"), side(m[~is_mem], "_pp"))
    memory = _totals("memcpy+memset", side(m[is_mem], "_hta"), side(m[is_mem], "_pp"))
    notes = []
    pp_kernels = int(breakdown.totals.get("kernels", -1))
    if breakdown.trace.device == "gpu" and pp_kernels != kernels.phaseprof_count:
        notes.append(f"phaseprof's breakdown counts {pp_kernels} kernels, its tables {kernels.phaseprof_count}")
    only_pp = m[(m["count_hta"] == 0) & (m["count_pp"] > 0)]
    if len(only_pp):
        notes.append(f"{int(only_pp['count_pp'].sum())} activities ({len(only_pp)} names) are not in HTA's "
                     "result (HTA keeps only work launched by host calls it found)")
    other = m[m["kernel_type"] == "OTHER"]
    if len(other):
        notes.append(f"{int(other['count_hta'].sum())} kernels of HTA type OTHER are left out of HTA's "
                     "breakdown tables; their sums here come from HTA's parsed trace")
    hta_busy = None
    if hta_type_df is not None and len(hta_type_df):
        hta_busy = float(hta_type_df["sum"].sum())
    return HtaCrossCheck(trace=trace, hta_version=hta_version, problem=None, kernels=kernels, memory=memory,
                         by_type=by_type, by_name=by_name, hta_busy_us=hta_busy,
                         phaseprof_busy_us=float(breakdown.totals.get("gpu_busy_us", 0.0)), notes=tuple(notes))


def cross_check_hta(trace_path: str | Path, breakdown: Breakdown) -> HtaCrossCheck:
    """Run HTA on ``trace_path`` and compare its kernel totals with phaseprof's (see module docstring).

    Never raises for HTA's own failures or its absence: the result then carries ``problem``.
    """
    trace = str(trace_path)
    version = _hta_version()
    if version is None:
        return HtaCrossCheck(trace, None, "HTA is not installed: pip install 'phaseprof[hta]'")
    try:
        hta_rows, type_df = run_hta(trace_path)
    except Exception as exc:  # noqa: BLE001 - any HTA failure becomes one line, never a traceback
        return HtaCrossCheck(trace, version, _explain(exc))
    pp_rows = _phaseprof_rows(trace_path)
    return compare(hta_rows, pp_rows, trace=trace, breakdown=breakdown, hta_type_df=type_df, hta_version=version)


def print_cross_check(result: HtaCrossCheck, console: Any) -> None:
    """Render a cross-check as rich tables: totals, per HTA kernel type, top kernel names."""
    from rich.table import Table

    from phaseprof.defaults import NAME_WIDTH

    head = f"HTA {result.hta_version or '(not installed)'} cross-check: {result.trace}"
    if result.problem is not None:
        console.print(f"[bold]{head}[/]\n[yellow]{result.problem}[/]")
        return

    def table(title: str, first: str, rows: list[KernelTotals], with_bucket: bool = False) -> Table:
        t = Table(title=title, title_justify="left")
        t.add_column(first, overflow="fold", max_width=NAME_WIDTH)
        if with_bucket:
            t.add_column("bucket")
        for c in ("HTA count", "phaseprof count", "HTA sum (us)", "phaseprof sum (us)", "diff %"):
            t.add_column(c, justify="right")
        for r in rows:
            same = r.hta_count == r.phaseprof_count and abs(r.time_diff_pct) <= TIME_TOLERANCE_PCT
            style = "" if same else "red"
            cells = [r.key[:NAME_WIDTH]] + ([r.bucket] if with_bucket else [])
            t.add_row(*cells, str(r.hta_count), str(r.phaseprof_count), f"{r.hta_time_us:,.1f}",
                      f"{r.phaseprof_time_us:,.1f}", f"{r.time_diff_pct:+.3f}", style=style)
        return t

    verdict = "[green]agree[/]" if result.agree else "[red]DISAGREE[/]"
    console.print(f"[bold]{head}[/]: {verdict} (counts equal, kernel time within {TIME_TOLERANCE_PCT}%; "
                  "times are plain sums of durations)")
    console.print(table("Totals", "what", [x for x in (result.kernels, result.memory) if x is not None]))
    console.print(table("Per HTA kernel type", "kernel type", list(result.by_type)))
    console.print(table(f"Top {SHOWN_NAMES} kernel names by phaseprof time", "kernel",
                        list(result.by_name[:SHOWN_NAMES]), with_bucket=True))
    if result.hta_busy_us is not None and result.phaseprof_busy_us is not None:
        console.print(f"GPU busy (union of intervals): HTA kernel-type breakdown {result.hta_busy_us:,.1f} us, "
                      f"phaseprof {result.phaseprof_busy_us:,.1f} us")
    for n in result.notes:
        console.print(f"[dim]note: {n}[/]")
