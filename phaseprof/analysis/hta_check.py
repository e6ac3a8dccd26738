"""``phaseprof analyze --cross-check hta``: HTA's kernel totals beside phaseprof's, for the same trace.

Holistic Trace Analysis (HTA 0.5.0, the ``hta`` extra) is run on the trace as its users run it:
``TraceAnalysis(trace_dir=...)`` on a temporary directory holding a link to the trace, then
``get_gpu_kernel_breakdown()``. Both sides are compared on equal terms:

- **time** = the plain *sum of durations* per kernel name (HTA's ``sum (us)``), not phaseprof's attributed
  time (which splits stream overlaps so buckets add up to GPU busy time);
- **kinds** = HTA's own kernel types (``COMPUTATION``, ``COMMUNICATION``, ``MEMORY`` = memcpy/memset, ``OTHER``),
  applied to phaseprof's names with HTA's function, so both sides group the same names together;
- HTA rounds nanosecond timestamps down to whole microseconds unless ``HTA_DISABLE_NS_ROUNDING=1``
  (measured: 6-8 % of kernel time lost on the H100/MI300X vLLM decode cuts in traces/public-cut, more on
  traces of shorter kernels), so it is set for the run;
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
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from phaseprof.analysis.results import Breakdown
from phaseprof.trace.read import load_tables
from phaseprof.trace.tables import EventTables

if TYPE_CHECKING:
    from phaseprof.analysis.pipeline import AnalysedTrace

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

    - ``kernels``: every GPU kernel (all HTA kernel types but MEMORY); ``memory``: memcpy + memset activities.
    - ``dropped_by_hta``: phaseprof's kernels missing from HTA's result, matched by correlation id (HTA keeps
      only work whose launch call it found inside the profiled steps); its HTA side is zero.
    - ``hta_busy_us``: the total of HTA's kernel-type table, i.e. the union of kernel and memory intervals
      with each merged interval truncated to whole us by HTA; ``phaseprof_busy_us``: phaseprof's whole-trace
      GPU busy time (same union, nanosecond exact). Informational: the truncation makes HTA's lower.
    """

    trace: str
    hta_version: str | None
    problem: str | None
    kernels: KernelTotals | None = None
    memory: KernelTotals | None = None
    by_type: tuple[KernelTotals, ...] = ()
    by_name: tuple[KernelTotals, ...] = ()
    dropped_by_hta: KernelTotals | None = None
    hta_busy_us: float | None = None
    phaseprof_busy_us: float | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def agree(self) -> bool:
        """Same kernels on both sides: counts equal, total kernel time within ``TIME_TOLERANCE_PCT``."""
        k = self.kernels
        return (self.problem is None and k is not None and k.hta_count == k.phaseprof_count
                and abs(k.time_diff_pct) <= TIME_TOLERANCE_PCT)

    @property
    def agree_on_common(self) -> bool:
        """Agreement on the kernels HTA kept: ``agree`` after setting ``dropped_by_hta`` aside."""
        k, d = self.kernels, self.dropped_by_hta
        if self.problem is not None or k is None or d is None:
            return False
        kept = KernelTotals("", "", k.hta_count, k.hta_time_us, k.phaseprof_count - d.phaseprof_count,
                            k.phaseprof_time_us - d.phaseprof_time_us)
        return kept.hta_count == kept.phaseprof_count and abs(kept.time_diff_pct) <= TIME_TOLERANCE_PCT


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


_GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset")


@dataclass(frozen=True)
class HtaView:
    """What HTA made of the trace: one row per GPU activity (``name, kernel_type, correlation, dur_us``),
    the per-name sums of ``get_gpu_kernel_breakdown`` and its kernel-type table, and what was set aside."""

    rows: pd.DataFrame
    breakdown_sums: pd.Series  # name -> HTA's "sum (us)"
    type_table: pd.DataFrame
    cpu_rows_as_kernels: int  # CPU ops HTA took for GPU work because they carry a "stream" argument


def run_hta(trace_path: str | Path) -> HtaView:
    """Run HTA on one trace file (see the module docstring). Raises whatever HTA raises."""
    src = Path(trace_path).resolve()
    suffix = ".json.gz" if src.name.endswith(".gz") else ".json"
    with _hta_environment(), tempfile.TemporaryDirectory(prefix="phaseprof-hta-") as tmp, \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")  # HTA's own pandas deprecation noise, not the user's concern
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
    on_stream = trace_df[trace_df["stream"].ne(-1)]  # the rows get_gpu_kernel_breakdown sums
    cats = np.array([sym[i] for i in on_stream["cat"].to_numpy()], dtype=object)
    is_gpu = np.isin(cats, _GPU_CATS)
    gpu = on_stream[is_gpu]
    names = [sym[i] for i in gpu["name"].to_numpy()]
    rows = pd.DataFrame({
        "name": pd.Series(names, dtype=object),
        "kernel_type": [get_kernel_type(n) for n in names],
        "correlation": gpu["correlation"].to_numpy(dtype=np.int64),
        "dur_us": gpu["dur"].to_numpy(dtype=np.float64),
    })
    return HtaView(rows=rows, breakdown_sums=kernel_df.groupby("name")["sum (us)"].sum(), type_table=type_df,
                   cpu_rows_as_kernels=int((~is_gpu).sum()))


def _phaseprof_rows(t: EventTables) -> pd.DataFrame:
    """phaseprof's GPU activities with raw (not attributed) durations, in the same columns as HTA's rows."""
    from hta.utils.utils import get_kernel_type

    gpu = t.gpu
    names = gpu["name"].astype(str)
    types = {n: get_kernel_type(n) for n in names.unique()}
    corr = gpu["correlation"].to_numpy()
    launched = (corr >= 0) & np.isin(corr, t.runtime["correlation"].to_numpy())
    return pd.DataFrame({"name": names.to_numpy(dtype=object), "kernel_type": names.map(types).to_numpy(),
                         "correlation": corr, "dur_us": gpu["dur_ns"].to_numpy() / 1000.0, "launched": launched})


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


def _per_name(rows: pd.DataFrame) -> pd.DataFrame:
    g = rows.groupby("name", sort=False)
    return pd.DataFrame({"count": g.size(), "sum_us": g["dur_us"].sum(), "kernel_type": g["kernel_type"].first()})


def _totals(key: str, hta: pd.DataFrame, pp: pd.DataFrame) -> KernelTotals:
    return KernelTotals(key, "", len(hta), float(hta["dur_us"].sum()), len(pp), float(pp["dur_us"].sum()))


def compare(hta: HtaView, pp_rows: pd.DataFrame, *, trace: str, breakdown: Breakdown,
            hta_version: str | None = None) -> HtaCrossCheck:
    """Line HTA's activities up with phaseprof's, per name and per HTA kernel type. Pure: no HTA call."""
    h_rows = hta.rows
    h = _per_name(h_rows)
    # Prefer HTA's own breakdown figure per name; it sums the same rows unless CPU ops were mixed in.
    sums = hta.breakdown_sums.reindex(h.index)
    if hta.cpu_rows_as_kernels == 0:
        h["sum_us"] = sums.fillna(h["sum_us"])
    p = _per_name(pp_rows)
    m = h.merge(p, how="outer", left_index=True, right_index=True, suffixes=("_hta", "_pp"))
    m["kernel_type"] = m["kernel_type_hta"].fillna(m["kernel_type_pp"])
    for c in ("count_hta", "count_pp", "sum_us_hta", "sum_us_pp"):
        m[c] = m[c].fillna(0)
    m = m.sort_values("sum_us_pp", ascending=False, kind="stable")
    buckets = _buckets(breakdown, [str(n) for n in m.index])
    by_name = tuple(KernelTotals(str(n), buckets.get(str(n), ""), int(r.count_hta), float(r.sum_us_hta),
                                 int(r.count_pp), float(r.sum_us_pp)) for n, r in m.iterrows())
    by_type = tuple(
        KernelTotals(str(t), "", int(g["count_hta"].sum()), float(g["sum_us_hta"].sum()),
                     int(g["count_pp"].sum()), float(g["sum_us_pp"].sum()))
        for t, g in m.groupby("kernel_type", sort=True))
    h_mem = h_rows["kernel_type"].isin(_NON_KERNEL_TYPES)
    p_mem = pp_rows["kernel_type"].isin(_NON_KERNEL_TYPES)
    kernels = _totals("kernels", h_rows[~h_mem], pp_rows[~p_mem])
    memory = _totals("memcpy+memset", h_rows[h_mem], pp_rows[p_mem])
    # Activities HTA left out, found by correlation id (HTA keeps only work whose launch call it found).
    h_corr = set(h_rows["correlation"].tolist())
    dropped = pp_rows[~pp_rows["correlation"].isin(h_corr)]
    notes = []
    pp_kernels = int(breakdown.totals.get("kernels", -1))
    if breakdown.trace.device == "gpu" and pp_kernels != kernels.phaseprof_count:
        notes.append(f"phaseprof's breakdown counts {pp_kernels} kernels, its tables {kernels.phaseprof_count}")
    if len(dropped):
        no_launch = int((~dropped["launched"]).sum()) if "launched" in dropped else 0
        notes.append(f"HTA left out {len(dropped)} GPU activities ({dropped['dur_us'].sum():,.1f} us) that "
                     f"phaseprof counts: {no_launch} whose launch call is not in the trace, "
                     f"{len(dropped) - no_launch} launched outside the profiled steps")
    if hta.cpu_rows_as_kernels:
        notes.append(f"HTA {hta_version} also takes {hta.cpu_rows_as_kernels} CPU op(s) carrying a 'stream' "
                     "argument (e.g. Triton launchers) for GPU kernels; they are left out here")
    other = m[m["kernel_type"] == "OTHER"]
    if len(other):
        notes.append(f"{int(other['count_hta'].sum())} kernels of HTA type OTHER are left out of HTA's "
                     "breakdown tables; their sums here come from HTA's parsed trace")
    hta_busy = float(hta.type_table["sum"].sum()) if len(hta.type_table) else None
    return HtaCrossCheck(trace=trace, hta_version=hta_version, problem=None, kernels=kernels, memory=memory,
                         by_type=by_type, by_name=by_name,
                         dropped_by_hta=_totals("left out by HTA", h_rows.iloc[0:0],
                                                dropped[~dropped["kernel_type"].isin(_NON_KERNEL_TYPES)]),
                         hta_busy_us=hta_busy, phaseprof_busy_us=float(breakdown.totals.get("gpu_busy_us", 0.0)),
                         notes=tuple(notes))


def cross_check_hta(trace: AnalysedTrace | str | Path, breakdown: Breakdown | None = None) -> HtaCrossCheck:
    """Run HTA on the trace and compare its kernel totals with phaseprof's (see module docstring).

    ``trace``: an ``AnalysedTrace`` (its tables and breakdown are used, nothing is loaded twice), or a trace
    path with its ``breakdown`` (then phaseprof's tables are loaded once HTA has succeeded).
    Never raises for HTA's own failures or its absence: the result then carries ``problem``.
    """
    from phaseprof.analysis.pipeline import AnalysedTrace

    analysed = trace if isinstance(trace, AnalysedTrace) else None
    trace_path = analysed.path if analysed is not None else str(trace)
    if breakdown is None:
        if analysed is None:
            raise TypeError("cross_check_hta needs the breakdown when given a path")
        breakdown = analysed.breakdown
    version = _hta_version()
    if version is None:
        return HtaCrossCheck(trace_path, None, "HTA is not installed: pip install 'phaseprof[hta]'")
    try:
        view = run_hta(trace_path)
    except Exception as exc:  # noqa: BLE001 - any HTA failure becomes one line, never a traceback
        return HtaCrossCheck(trace_path, version, _explain(exc))
    tables = analysed.tables if analysed is not None else load_tables(trace_path)
    return compare(view, _phaseprof_rows(tables), trace=trace_path, breakdown=breakdown, hta_version=version)


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
        # Numbers never shrink; the name column takes what is left of the terminal.
        width = max(16, min(NAME_WIDTH, console.width - (67 if with_bucket else 52)))
        t.add_column(first, no_wrap=True, overflow="ellipsis", max_width=width)
        if with_bucket:
            t.add_column("bucket", no_wrap=True, min_width=11)
        for c in ("HTA n", "pp n", "HTA us", "pp us", "diff %"):
            t.add_column(c, justify="right", no_wrap=True, min_width=len(c))
        for r in rows:
            same = r.hta_count == r.phaseprof_count and abs(r.time_diff_pct) <= TIME_TOLERANCE_PCT
            style = "" if same else "red"
            cells = [r.key[:NAME_WIDTH]] + ([r.bucket] if with_bucket else [])
            t.add_row(*cells, f"{r.hta_count:,}", f"{r.phaseprof_count:,}", f"{r.hta_time_us:,.1f}",
                      f"{r.phaseprof_time_us:,.1f}", f"{r.time_diff_pct:+.2f}", style=style)
        return t

    verdict = "[green]agree[/]" if result.agree else "[red]DISAGREE[/]"
    console.print(f"[bold]{head}[/]: {verdict} (counts equal, kernel time within {TIME_TOLERANCE_PCT}%; "
                  "times are plain sums of durations; pp = phaseprof)")
    console.print(table("Totals", "what", [x for x in (result.kernels, result.memory) if x is not None]))
    console.print(table("Per HTA kernel type", "kernel type", list(result.by_type)))
    console.print(table(f"Top {SHOWN_NAMES} kernel names by phaseprof time", "kernel",
                        list(result.by_name[:SHOWN_NAMES]), with_bucket=True))
    if result.dropped_by_hta is not None and result.dropped_by_hta.phaseprof_count:
        d = result.dropped_by_hta
        console.print(f"Kernels HTA left out: {d.phaseprof_count} ({d.phaseprof_time_us:,.1f} us); on the kernels "
                      f"both kept they {'agree' if result.agree_on_common else 'DISAGREE'}")
    if result.hta_busy_us is not None and result.phaseprof_busy_us is not None:
        console.print(f"GPU busy (union of intervals): HTA's kernel-type table {result.hta_busy_us:,.1f} us "
                      f"(each merged interval truncated to whole us by HTA), phaseprof {result.phaseprof_busy_us:,.1f} us")
    for n in result.notes:
        console.print(f"[dim]note: {n}[/]")
