"""A BreakdownDiff as a compact PR comment: headline deltas first, every table in a collapsible block.

Pure rendering (every number comes from the diff). The result always stays under ``MAX_CHARS``: detail rows
that do not fit are dropped with a note saying how many (``--format json`` keeps everything).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from phaseprof.report.diff import BreakdownDiff, BucketDelta, Delta, KernelMatch, KernelSide, PhaseDiff
from phaseprof.report.fail_on import CheckResult, describe
from phaseprof.safe_text import code_span, markdown

#: GitHub rejects comments over 65,536 characters; stay clearly below.
MAX_CHARS = 65_000
#: Kernel names are cut to this many characters in the tables.
KERNEL_NAME_CHARS = 90
#: Headline: this many biggest share shifts (kernel view) per phase.
HEADLINE_SHIFTS = 3
#: Headline metrics per phase, in order.
HEADLINE_METRICS = ("wall_ms", "gpu_busy_ms", "busy_pct", "launch_overhead_ms", "kernels_per_step",
                    "launches_per_step")
METRIC_LABELS: dict[str, str] = {
    "wall_ms": "wall ms/step", "gpu_busy_ms": "GPU busy ms/step", "gpu_idle_ms": "GPU idle ms/step",
    "busy_pct": "GPU busy % of wall", "launch_overhead_ms": "idle in launch calls ms/step",
    "host_work_ms": "idle on host work ms/step", "other_idle_ms": "other idle ms/step",
    "kernels_per_step": "kernels/step", "launches_per_step": "launch calls/step",
    "graph_launches_per_step": "graph launches/step", "allocations_per_step": "allocator allocations/step",
    "gpu_allocations_per_step": "GPU allocations/step", "device_mallocs_per_step": "device mallocs/step",
    "memcpy_per_step": "memcpys/step", "ttft_ms": "TTFT ms (clean)", "tpot_ms": "TPOT ms (clean)",
}


def fmt_value(x: float | None, unit: str) -> str:
    """A number for a table cell: ms with 3 decimals, percent with 1, counts with up to 1."""
    if x is None:
        return "–"
    if unit == "ms":
        return f"{x:,.3f}"
    if unit == "%":
        return f"{x:.1f}"
    return f"{x:,.1f}" if x != int(x) else f"{int(x):,}"


def fmt_change(d: Delta) -> str:
    """``+1.234`` (ms), ``+2.5 pp`` (shares), ``+12`` (counts); ``–`` when a side is missing."""
    if d.change is None:
        return "–"
    if d.unit == "%":
        return f"{d.change:+.1f} pp"
    if d.unit == "ms":
        return f"{d.change:+,.3f}"
    return f"{d.change:+,.1f}" if d.change != int(d.change) else f"{int(d.change):+,}"


def fmt_rel(d: Delta) -> str:
    if d.rel_pct is None:
        return "new" if d.change and d.a == 0 else "–"
    return f"{d.rel_pct:+.1f}%" if math.isfinite(d.rel_pct) else "–"


def cell(text: str) -> str:
    """Text from a breakdown (bucket, phase, module names) safe in running text or a GFM table cell:
    ``safe_text.markdown``, the one markdown escaper (links, images, raw HTML and autolinks stay text)."""
    return markdown(text)


def kernel_cell(k: KernelSide | None) -> str:
    if k is None:
        return "—"
    name = k.name
    if len(name) > KERNEL_NAME_CHARS:
        name = name[: KERNEL_NAME_CHARS - 1] + "…"
    return code_span(name)


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _metric_rows(deltas: Sequence[Delta], prefix: str = "") -> list[str]:
    return [_row([cell(prefix + METRIC_LABELS.get(d.metric, d.metric)), fmt_value(d.a, d.unit),
                  fmt_value(d.b, d.unit), fmt_change(d), fmt_rel(d)]) for d in deltas]


def _shifts(ph: PhaseDiff) -> str:
    moved = sorted((b for b in ph.kernel_view if b.share.change and abs(b.share.change) >= 0.05),
                   key=lambda b: -abs(b.share.change or 0.0))[:HEADLINE_SHIFTS]
    return ", ".join(f"**{cell(b.bucket)}** {fmt_change(b.share)} ({fmt_value(b.share.a, '%')}% → "
                     f"{fmt_value(b.share.b, '%')}%)" for b in moved) or "none above 0.05 pp"


def _headline(d: BreakdownDiff, checks: Sequence[CheckResult]) -> list[str]:
    a, b = d.a, d.b
    out = [f"### phaseprof diff: {code_span(a.label, table_cell=False)} → {code_span(b.label, table_cell=False)}",
           "", f"**A** {cell(a.gpu)} ({cell(a.platform)}, {cell(a.mode or 'mode unknown')}) · "
           f"**B** {cell(b.gpu)} ({cell(b.platform)}, {cell(b.mode or 'mode unknown')}) · changes are B − A, per step",
           ""]
    if d.warnings:
        out += ["> ⚠️ **Not like for like:** " + markdown("; ".join(d.warnings)) + ".", ""]
    unknown = [c.aspect for c in d.comparability if c.status == "unknown"]
    if unknown:
        out += [f"_Not recorded on both sides, so not checked: {cell(', '.join(unknown))}._", ""]
    out += [f"_{markdown(n)}._" for n in d.notes] + ([""] if d.notes else [])
    if d.only_in_a or d.only_in_b:
        out += [f"_Phases only in A: {cell(', '.join(d.only_in_a)) or 'none'}; only in B: "
                f"{cell(', '.join(d.only_in_b)) or 'none'} (not compared)._", ""]
    if checks:
        failed = [c for c in checks if c.failed]
        out += [f"**--fail-on: {len(failed)} of {len(checks)} check(s) failed**", ""]
        out += [f"- {'❌' if c.failed else '✅'} {cell(describe(c))}" for c in checks]
        out.append("")
    out += ["| | A | B | Δ | Δ % |", "|---|--:|--:|--:|--:|"]
    out += _metric_rows(d.timings)
    for ph in d.phases:
        rows = [m for name in HEADLINE_METRICS if (m := ph.metric(name)) is not None]
        out += _metric_rows(rows, prefix=f"{ph.phase} · ")
    out.append("")
    for ph in d.phases:
        out.append(f"- **{cell(ph.phase)}** biggest share shifts (kernel view, % of GPU busy): {_shifts(ph)}")
    if not d.phases:
        out.append("_No phase in common: nothing to compare._")
    return out


def _bucket_table(rows: Sequence[BucketDelta], view: str) -> list[str]:
    out = [_row([f"bucket ({view} view)", "A ms/step", "B ms/step", "Δ ms", "A %", "B %", "Δ pp",
                 "A items/step", "B items/step"]), "|---|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for r in rows:
        out.append(_row([cell(r.bucket), fmt_value(r.time_ms.a, "ms"), fmt_value(r.time_ms.b, "ms"),
                         fmt_change(r.time_ms), fmt_value(r.share.a, "%"), fmt_value(r.share.b, "%"),
                         fmt_change(r.share).replace(" pp", ""), fmt_value(r.count.a, "count"),
                         fmt_value(r.count.b, "count")]))
    return out


def _kernel_table(rows: Sequence[KernelMatch]) -> list[str]:
    out = [_row(["bucket", "module", "A kernel", "B kernel", "A ms/step", "B ms/step", "Δ ms", "A calls/step",
                 "B calls/step", "matched by"]), "|---|---|---|---|--:|--:|--:|--:|--:|---|"]
    for m in rows:
        ams = m.a.ms_per_step if m.a else 0.0
        bms = m.b.ms_per_step if m.b else 0.0
        bucket = m.bucket if m.b_bucket is None or m.b_bucket == m.bucket else f"{m.bucket} → {m.b_bucket}"
        module = m.module if m.b_module is None or m.b_module == m.module else f"{m.module} → {m.b_module}"
        out.append(_row([cell(bucket), cell(module), kernel_cell(m.a), kernel_cell(m.b),
                         fmt_value(m.a.ms_per_step if m.a else None, "ms"),
                         fmt_value(m.b.ms_per_step if m.b else None, "ms"), f"{bms - ams:+,.3f}",
                         fmt_value(m.a.calls_per_step if m.a else None, "count"),
                         fmt_value(m.b.calls_per_step if m.b else None, "count"), m.how]))
    return out


def _details(d: BreakdownDiff) -> list[str]:
    out = ["**Comparability**", "", "| aspect | A | B | |", "|---|---|---|---|"]
    out += [_row([cell(c.aspect), cell(c.a), cell(c.b), {"same": "✅", "differs": "⚠️"}.get(c.status, "?")])
            for c in d.comparability]
    for ph in d.phases:
        out += ["", f"#### {cell(ph.phase)} (A {ph.a_steps} steps, B {ph.b_steps} steps)", "",
                "| per step | A | B | Δ | Δ % |", "|---|--:|--:|--:|--:|"]
        out += _metric_rows(ph.metrics)
        out += [""] + _bucket_table(ph.kernel_view, "kernel") + [""] + _bucket_table(ph.module_view, "module")
        if ph.coverage:
            out += ["", "| module view from (% of GPU busy) | A | B | Δ | Δ % |", "|---|--:|--:|--:|--:|"]
            out += _metric_rows(ph.coverage)
        if ph.layers:
            out += ["", "| decoder layer (ms/step) | A | B | Δ | Δ % |", "|---|--:|--:|--:|--:|"]
            out += _metric_rows(ph.layers)
        out += ["", "| launch API | A calls/step | B calls/step | Δ | Δ % |", "|---|--:|--:|--:|--:|"]
        out += _metric_rows(ph.launches_by_api)
        matched = sum(m.how != "unmatched" for m in ph.kernels)
        out += ["", f"Kernels matched by the same name first (across buckets and modules: `A → B`), then by order "
                f"or time rank within a bucket and module ({matched} pairs, {len(ph.kernels) - matched} unmatched; "
                "top kernels per bucket only):", ""]
        out += _kernel_table(ph.kernels)
    return out


def _fit(lines: list[str], budget: int) -> tuple[list[str], int]:
    """The longest prefix of ``lines`` whose joined length stays within ``budget``, and how many were cut."""
    used = 0
    for i, line in enumerate(lines):
        used += len(line) + 1
        if used > budget:
            return lines[:i], len(lines) - i
    return lines, 0


def diff_markdown(d: BreakdownDiff, *, checks: Sequence[CheckResult] = (), max_chars: int = MAX_CHARS) -> str:
    """Render ``d`` (and the ``--fail-on`` results, if any) as GitHub-flavoured markdown under ``max_chars``."""
    note = ("_… {n} more line(s) left out to stay under {limit:,} characters (GitHub's comment limit); "
            "`phaseprof diff --format json` has everything._")
    reserve = len(note) + 80
    head, cut_head = _fit(_headline(d, checks), max_chars // 2)
    if cut_head:
        head += ["", note.format(n=cut_head, limit=max_chars)]
    opening = ["", "<details><summary>Full tables: every per-step metric, both bucket views, launch APIs, "
               "matched kernels</summary>", ""]
    closing = ["", "</details>"]
    used = sum(len(x) + 1 for x in head + opening + closing)
    body, cut = _fit(_details(d), max_chars - used - reserve)
    if cut:
        body += ["", note.format(n=cut, limit=max_chars)]
    return "\n".join(head + opening + body + closing) + "\n"
