"""Sweep: TTFT vs prompt tokens (prefill sweeps) or TPOT vs concurrency (decode sweeps), several overlaid.

Reads the ``sweep.json`` files ``phaseprof sweep`` writes under the runs directory and plots their stored
medians and p10/p90 spreads as they are (no number is recomputed here).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from phaseprof.dashboard import charts, data, widgets
from phaseprof.dashboard.sources import first_of, guard, read_json
from phaseprof.dashboard.text import code, md

#: Where a sweep point keeps its x and its y statistics, for prefill and for decode sweeps.
_POINT_LISTS = ("points", "results", "rows", "lengths")
_X = {"prefill": ("prompt_tokens", "tokens", "request.prompt_tokens", "timing.prompt_tokens"),
      "decode": ("concurrency", "batch_size", "request.concurrency")}
_Y = {"prefill": "ttft", "decode": "tpot"}


def _points(doc: dict[str, Any]) -> list[dict[str, Any]]:
    for k in _POINT_LISTS:
        v = doc.get(k)
        if isinstance(v, list) and all(isinstance(p, dict) for p in v):
            return v
    return []


def curve(doc: dict[str, Any], name: str) -> dict[str, Any] | None:
    """One sweep as ``{"name", "phase", "x", "y", "lo", "hi"}`` (ms), or None when it has no usable points."""
    phase = str(first_of(doc, ("phase", "request.phase", "options.phase")) or "prefill")
    if phase not in _X:
        phase = "prefill"
    what = _Y[phase]
    xs, ys, lo, hi = [], [], [], []
    for p in _points(doc):
        x = first_of(p, _X[phase])
        y = first_of(p, (f"{what}.median_ms", f"timing.{what}.median_ms", f"{what}_ms", f"{what}_median_ms",
                         "median_ms"))
        if x is None or y is None:
            continue
        xs.append(x)
        ys.append(y)
        lo.append(first_of(p, (f"{what}.p10_ms", f"timing.{what}.p10_ms", f"{what}_p10_ms", "p10_ms")))
        hi.append(first_of(p, (f"{what}.p90_ms", f"timing.{what}.p90_ms", f"{what}_p90_ms", "p90_ms")))
    if not xs:
        return None
    spread = all(v is not None for v in lo + hi)
    throughput = [first_of(p, ("output_tok_per_s.median",)) for p in _points(doc)
                  if first_of(p, _X[phase]) is not None]
    return {"name": name, "phase": phase, "x": xs, "y": ys, "lo": lo if spread else None,
            "hi": hi if spread else None, "slope_us_per_token": first_of(doc, ("slope_us_per_token",)),
            "output_tok_per_s": throughput if any(v is not None for v in throughput) else None}


def _name(path: Path, ctx: data.Context, doc: dict[str, Any]) -> str:
    rel = path.parent.relative_to(ctx.runs_dir).as_posix() if path.parent != ctx.runs_dir else path.name
    model = first_of(doc, ("model.name", "model"))
    gpu = first_of(doc, ("device.name", "gpu"))
    mode = first_of(doc, ("engine.mode", "mode", "options.mode"))
    extra = " · ".join(str(v) for v in (gpu, model, mode) if v)
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
            doc = read_json(guard(f, ctx.roots))
        except Exception as e:  # noqa: BLE001 - one bad file must not hide the others
            bad.append(f"{f.name}: {widgets.one_line(e)}")
            continue
        c = curve(doc, _name(f, ctx, doc))
        if c is None:
            bad.append(f"{f.parent.name}/{f.name}: no points with a median time")
        else:
            curves.append(c)
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
    x_title, y_title = ("prompt tokens", "TTFT ms") if phase == "prefill" else ("concurrency", "TPOT ms")
    st.plotly_chart(charts.sweep_curves(shown, x_title=x_title, y_title=y_title), key="sweep_chart")
    slopes = [f"{md(c['name'])}: {c['slope_us_per_token']:,.2f} µs per prompt token" for c in shown
              if c.get("slope_us_per_token") is not None]
    if slopes:
        st.caption("Least-squares slope (from `phaseprof sweep`): " + "; ".join(slopes))
    st.caption("Lines: median over reps, measured with the profiler off; bands: p10 to p90.")
    table = pd.concat([pd.DataFrame({"sweep": c["name"], x_title: c["x"], f"{y_title} (median)": c["y"],
                                     "p10": c["lo"], "p90": c["hi"],
                                     **({"output tok/s (median)": c["output_tok_per_s"]}
                                        if c.get("output_tok_per_s") else {})})
                       for c in shown], ignore_index=True)
    widgets.table(st, table, key="sweep_table")
