"""Sweep: TTFT vs prompt tokens (prefill sweeps) or TPOT vs concurrency (decode sweeps), several overlaid.

Reads the ``sweep.json`` files ``phaseprof sweep`` writes under the runs directory (``records.SweepRecord``)
and plots their stored medians and p10/p90 spreads as they are (no number is recomputed here).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from phaseprof.dashboard import charts, data, widgets
from phaseprof.dashboard.sources import guard
from phaseprof.dashboard.text import code, md
from phaseprof.records import SweepRecord

_Y = {"prefill": "ttft", "decode": "tpot"}


def curve(rec: SweepRecord, name: str) -> dict[str, Any] | None:
    """One sweep as ``{"name", "phase", "x", "y", "lo", "hi"}`` (ms), or None when it has no usable points."""
    xs, ys, lo, hi, throughput = [], [], [], [], []
    for p in rec.points:
        x, stats = rec.x_of(p), p.stats(rec.y_key)
        if x is None or stats is None:
            continue
        xs.append(x)
        ys.append(stats.median_ms)
        lo.append(stats.p10_ms)
        hi.append(stats.p90_ms)
        throughput.append(p.output_tok_per_s.median if p.output_tok_per_s is not None else None)
    if not xs:
        return None
    spread = all(v is not None for v in lo + hi)
    return {"name": name, "phase": rec.phase, "x": xs, "y": ys, "lo": lo if spread else None,
            "hi": hi if spread else None, "slope_us_per_token": rec.slope_us_per_token,
            "output_tok_per_s": throughput if any(v is not None for v in throughput) else None}


def short_labels(paths: list[str]) -> list[str]:
    """Legend labels for sweeps overlaid: the parts of their directory paths that tell them apart, first
    differing component first, more until each is unique ("eager", "graph", "server-graph" for
    ``h200/eager/<stamp>-sweep-…``, ``h200/graph/<stamp>-sweep-…``, ``h200/server-graph/sweep-…``); the last
    component alone for a single sweep (full paths took two thirds of the chart's width)."""
    parts = [p.split("/") for p in paths]
    if len(parts) < 2:
        return [p[-1] for p in parts]
    depth = max(len(p) for p in parts)
    cols = [[p[i] if i < len(p) else "" for p in parts] for i in range(depth)]
    differ = [i for i, col in enumerate(cols) if len(set(col)) > 1]
    for n in range(1, len(differ) + 1):
        labels = ["/".join(x for i in differ[:n] if (x := cols[i][k])) for k in range(len(parts))]
        if len(set(labels)) == len(labels):
            return labels
    return paths


def _name(path: Path, ctx: data.Context, rec: SweepRecord) -> str:
    rel = path.parent.relative_to(ctx.runs_dir).as_posix() if path.parent != ctx.runs_dir else path.name
    device = rec.device.gpu_name or rec.device.name  # a served sweep: its GPU, once learned
    extra = " · ".join(str(v) for v in (device, rec.model.name, rec.engine.mode) if v)
    return f"{rel} ({extra})" if extra else rel


def render(st: Any, ctx: data.Context) -> None:
    st.title("Sweep")
    files = data.sweeps(ctx)
    if not files:
        st.info(f"No sweep.json under {code(ctx.runs_dir)}. Run e.g. `phaseprof sweep --phase prefill "
                "--tokens 128,256,512,1024,2048,4096,8192` and reload.")
        return
    curves, bad = [], []
    for f in files:
        try:
            rec = SweepRecord.read(guard(f, ctx.roots))
        except Exception as e:  # noqa: BLE001 - one bad file must not hide the others
            bad.append(f"{f.name}: {widgets.one_line(e)}")
            continue
        c = curve(rec, _name(f, ctx, rec))
        if c is None:
            bad.append(f"{f.parent.name}/{f.name}: no points with a median time")
        else:
            curves.append({**c, "dir": f.parent.relative_to(ctx.runs_dir).as_posix() if f.parent != ctx.runs_dir
                           else f.name})
    for b in bad:
        st.error(md(b))
    if not curves:
        return
    phases = [p for p in _Y if any(c["phase"] == p for c in curves)]  # prefill first
    phase = st.radio("Sweep", phases, horizontal=True, key="sweep_phase",
                     format_func=lambda p: "prefill: TTFT vs prompt tokens" if p == "prefill"
                     else "decode: TPOT vs concurrency")
    mine = [c for c in curves if c["phase"] == phase]
    names = [c["name"] for c in mine]
    chosen = st.multiselect("Sweeps to overlay", names, default=names, key=f"sweep_sel_{phase}")
    shown = [c for c in mine if c["name"] in chosen]
    if not shown:
        return
    labels = short_labels([c["dir"] for c in shown])
    shown = [{**c, "name": label, "full": c["name"]} for c, label in zip(shown, labels)]
    x_title, y_title = ("prompt tokens", "TTFT ms") if phase == "prefill" else ("concurrency", "TPOT ms")
    widgets.chart(st, charts.sweep_curves(shown, x_title=x_title, y_title=y_title), key="sweep_chart")
    from phaseprof.render.slope import slope_text  # noqa: PLC0415

    slopes = [f"{md(c['name'])}: {md(slope_text(c['slope_us_per_token']))}" for c in shown
              if c.get("slope_us_per_token") is not None]
    if slopes:
        st.caption("TTFT slope (from `phaseprof sweep`): " + "; ".join(slopes))
    st.caption("Lines: median over reps, measured with the profiler off; bands: p10 to p90.")
    st.caption("Legend: " + "; ".join(f"{md(c['name'])} = {md(c['full'])}" for c in shown))
    table = pd.concat([pd.DataFrame({"sweep": c["name"], x_title: c["x"], f"{y_title} (median)": c["y"],
                                     "p10": c["lo"], "p90": c["hi"],
                                     **({"output tok/s (median)": c["output_tok_per_s"]}
                                        if c.get("output_tok_per_s") else {})})
                       for c in shown], ignore_index=True)
    widgets.table(st, table, key="sweep_table")
