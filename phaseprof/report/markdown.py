"""Markdown rendering of a Breakdown, for PR comments (headline first, details collapsible)."""

from __future__ import annotations

from phaseprof.analysis.results import Breakdown
from phaseprof.safe_text import code_span, markdown


def _ms(us: float) -> str:
    return f"{us / 1000:,.2f}"


def breakdown_markdown(bd: Breakdown, *, top: int = 5, by_layer: bool = True) -> str:
    tr = bd.trace
    # Every string here came from the trace (names, GPU, notes): through safe_text's markdown or code_span.
    out = [f"### phaseprof breakdown: {code_span(tr.path.rsplit('/', 1)[-1], table_cell=False)}", "",
           f"{markdown(tr.gpu_name or tr.platform)} · {markdown(tr.device)} trace · steps: "
           f"{markdown(bd.step_detection['detail'])}", ""]
    if bd.verdicts is not None:
        out += [f"- **{markdown(v.line)}**" for v in bd.verdicts.phases]
        out += [f"- ⚠️ {markdown(n)}" for n in bd.verdicts.noise]
        out.append("")
    if bd.profiler is not None:
        out += [f"- {markdown(n)}" for n in bd.profiler.lines()] + [""]
    out += ["Means per step; the phase's total wall time in the last column.", "",
            "| phase | steps | wall ms | busy ms | busy % | launch ovh ms | host work ms | kernels | "
            "launch calls | allocs | wall ms, total |", "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for ph in bd.phases:
        s = ph.per_step
        pct = 100 * ph.gpu_busy_us / ph.wall_us if ph.wall_us else 0.0
        out.append(f"| {markdown(ph.phase)} | {ph.steps} | {_ms(s['wall_us'].mean)} | {_ms(s['gpu_busy_us'].mean)} | "
                   f"{pct:.1f} | {_ms(s['launch_overhead_us'].mean)} | {_ms(s['host_work_us'].mean)} | "
                   f"{s['kernels'].mean:,.0f} | {s['launch_calls'].mean:,.0f} | {s['allocations'].mean:,.0f} | "
                   f"{_ms(ph.wall_us)} |")
    for ph in bd.phases:
        out += ["", f"**{markdown(ph.phase)}** — kernel view / module view (ms in all {ph.steps} step(s), % of GPU "
                "busy)", "",
                "| bucket | kernel ms | kernel % | module ms | module % |", "|---|--:|--:|--:|--:|"]
        mod = {b.bucket: b for b in ph.module_view}
        names = [b.bucket for b in ph.kernel_view] + [b for b in mod if b not in {x.bucket for x in ph.kernel_view}]
        kv = {b.bucket: b for b in ph.kernel_view}
        for n in names:
            k, m = kv.get(n), mod.get(n)
            out.append(f"| {markdown(n)} | {_ms(k.time_us) if k else '-'} | {f'{k.share_pct:.1f}' if k else '-'} | "
                       f"{_ms(m.time_us) if m else '-'} | {f'{m.share_pct:.1f}' if m else '-'} |")
        out += ["", "<details><summary>top kernels</summary>", "", "| bucket | kernel | count | ms | % |",
                "|---|---|--:|--:|--:|"]
        for b in ph.kernel_view:
            for k in ph.top_kernels.get(b.bucket, [])[:top]:
                out.append(f"| {markdown(b.bucket)} | {code_span(k.name[:120])} | {k.count} | {_ms(k.time_us)} | {k.share_pct:.1f} |")
        out += ["", "</details>"]
    if bd.unknown_kernels:
        out += ["", f"⚠️ {len(bd.unknown_kernels)} unclassified kernel name(s), "
                f"{_ms(sum(k.time_us for k in bd.unknown_kernels))} ms"]
    if bd.sol is not None:
        from phaseprof.sol.render import sol_markdown

        out += sol_markdown(bd.sol)
    from phaseprof.report.attribution import attribution_markdown  # noqa: PLC0415

    return "\n".join(out) + "\n" + attribution_markdown(bd, by_layer=by_layer)
