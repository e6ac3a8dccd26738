"""What ``phaseprof diff`` shows from the sol sections: the ceilings-vs-efficiency split per bucket (A and B
on different GPUs) and ``--project-to GPU`` (one capture at equal efficiency on another GPU, an estimate)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import orjson

from rich import box
from rich.console import Console
from rich.table import Table

from phaseprof.analysis.results import Breakdown
from phaseprof.routing import read_routing
from phaseprof.safe_text import terminal
from phaseprof.sol.attach import attach_sol, find_model, run_dir_of, run_record_of
from phaseprof.sol.ceilings import spec_by_name
from phaseprof.sol.project import BucketChange, Projection, explain, project, sentence

ESTIMATE = "ESTIMATE, not a measurement"


def with_sol(bd: Breakdown, source: str | Path | None, model_config: str | None = None) -> Breakdown:
    """The side's breakdown with a sol section (kept if it already has a computed one)."""
    if bd.sol is not None and bd.sol.ok and model_config is None:
        return bd
    return attach_sol(bd, source=source, model_config=model_config)


def changes(a: Breakdown, b: Breakdown) -> list[BucketChange]:
    """Per-bucket split when both sides have SOL numbers and ran on different ceilings, else []."""
    if not (a.sol and b.sol and a.sol.ok and b.sol.ok) or a.sol.ceiling == b.sol.ceiling:
        return []
    return explain(a.sol, b.sol)


def changes_table(rows: list[BucketChange], a: Breakdown, b: Breakdown) -> Table:
    ca, cb = a.sol.ceiling, b.sol.ceiling  # type: ignore[union-attr]
    t = Table(title=f"speed of light: A {ca.gpu} ({ca.kind}) vs B {cb.gpu} ({cb.kind}), per step",
              title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("phase", "bucket", "A ms", "B ms", "speedup", "ceilings", "effic.", "A %", "B %"):
        t.add_column(col, justify="left" if col in ("phase", "bucket") else "right", no_wrap=True)
    for c in rows:
        t.add_row(c.phase, c.bucket, f"{c.a_ms:,.2f}", f"{c.b_ms:,.2f}", f"{c.speedup:.2f}x", f"{c.ceilings:.2f}x",
                  f"{c.efficiency:.2f}x", f"{c.a_pct_of_light:.0f}", f"{c.b_pct_of_light:.0f}")
    t.caption = "speedup = A ms / B ms = ceilings (floor A / floor B) x efficiency (% of light B / A)"
    return t


def print_changes(a: Breakdown, b: Breakdown, console: Console) -> None:
    rows = changes(a, b)
    if rows:
        console.print(changes_table(rows, a, b))
        for c in rows[:3]:
            console.print(terminal(sentence(c)))


def with_changes_json(doc: bytes, a: Breakdown, b: Breakdown) -> bytes:
    """The diff JSON with a ``speed_of_light`` list (the per-bucket split) when there is one."""
    rows = changes(a, b)
    if not rows:
        return doc
    out = orjson.loads(doc)
    out["speed_of_light"] = [dataclasses.asdict(c) for c in rows]
    return orjson.dumps(out, option=orjson.OPT_INDENT_2)


def changes_markdown(a: Breakdown, b: Breakdown) -> str:
    rows = changes(a, b)
    if not rows:
        return ""
    out = ["", "#### Speed of light: ceilings vs efficiency", "", "| phase | bucket | A ms | B ms | speedup | "
           "ceilings | efficiency | A % of light | B % of light |", "|---|---|--:|--:|--:|--:|--:|--:|--:|"]
    from phaseprof.safe_text import markdown  # noqa: PLC0415 - phase and bucket names come from breakdown files

    out += [f"| {markdown(c.phase)} | {markdown(c.bucket)} | {c.a_ms:,.2f} | {c.b_ms:,.2f} | {c.speedup:.2f}x | {c.ceilings:.2f}x | "
            f"{c.efficiency:.2f}x | {c.a_pct_of_light:.0f} | {c.b_pct_of_light:.0f} |" for c in rows]
    return "\n".join(out) + "\n"


def projection_for(bd: Breakdown, source: str | Path | None, target: str, model_config: str | None) -> Projection:
    """``bd`` (one side of a diff) projected onto the datasheet ceilings of ``target``."""
    from phaseprof.errors import PhaseprofError

    bd = with_sol(bd, source, model_config)
    run = run_record_of(source)
    model, where = find_model((run, bd.capture), model_config)
    if model is None or bd.sol is None or not bd.sol.ok:
        status = bd.sol.status if bd.sol is not None else "not computed"
        raise PhaseprofError(f"cannot project {source}: speed of light {status} ({where})")
    routing = read_routing(run_dir_of(source), run.routing if run is not None else None) \
        if source is not None else None
    return project(bd, model, spec_by_name(target), routing)


def projection_table(p: Projection) -> Table:
    t = Table(title=f"{ESTIMATE}: {p.source_gpu} capture on {p.target.gpu} ({p.target.kind}) at equal "
              "efficiency, per step", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("phase", "bucket", "measured", "% light", "floor", f"{p.target.gpu} floor", "estimate"):
        t.add_column(col, justify="left" if col in ("phase", "bucket") else "right", no_wrap=True)
    for b in p.buckets:
        t.add_row(b.phase, b.bucket, f"{b.measured_ms:,.2f}", f"{b.pct_of_light:.0f}", f"{b.floor_ms:,.2f}",
                  f"{b.target_floor_ms:,.2f}", f"[bold]{b.projected_ms:,.2f}[/]")
    t.caption = "ms; estimate = measured x target floor / floor; other GPU time carried over unchanged"
    return t


def print_projection(p: Projection, console: Console) -> None:
    console.print(projection_table(p))
    for ph, ms in p.projected_busy_ms.items():
        console.print(f"{ph}: GPU busy {p.busy_ms[ph]:,.2f} ms/step measured on {terminal(p.source_gpu)} -> "
                      f"{ms:,.2f} ms/step on {p.target.gpu} ({ESTIMATE})")


def projection_markdown(p: Projection) -> str:
    out = [f"### {ESTIMATE}: {p.source_gpu} capture projected onto {p.target.gpu} at equal efficiency", "",
           "| phase | bucket | measured ms | % of light | floor ms | target floor ms | projected ms (estimate) |",
           "|---|---|--:|--:|--:|--:|--:|"]
    out += [f"| {b.phase} | {b.bucket} | {b.measured_ms:,.2f} | {b.pct_of_light:.0f} | {b.floor_ms:,.2f} | "
            f"{b.target_floor_ms:,.2f} | {b.projected_ms:,.2f} |" for b in p.buckets]
    out += [""] + [f"- {ph}: GPU busy {p.busy_ms[ph]:,.2f} ms/step measured → {ms:,.2f} ms/step estimated"
                   for ph, ms in p.projected_busy_ms.items()]
    return "\n".join(out) + "\n"
