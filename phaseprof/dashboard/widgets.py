"""Pieces every page shares: settings, the run picker, and the error boundary (one line, never a traceback)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from phaseprof.dashboard import data
from phaseprof.dashboard.sources import Roots, Source
from phaseprof.dashboard.text import code, md
from phaseprof.errors import PhaseprofError
from phaseprof.safe_text import plotly_figure

ENV_RUNS_DIR = "PHASEPROF_RUNS_DIR"
ENV_MAX_UPLOAD_MB = "PHASEPROF_MAX_UPLOAD_MB"
ENV_UPLOAD_DIR = "PHASEPROF_UPLOAD_DIR"  # where uploads are kept (default: a private temp dir per server)


def settings(argv: Sequence[str], env: Mapping[str, str]) -> tuple[Path, int]:
    """Runs directory and upload cap: ``-- --runs-dir D --max-upload-mb N`` after the script (what
    ``phaseprof dashboard`` passes), else the ``PHASEPROF_*`` environment variables, else ``./runs``, 512."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--runs-dir")
    p.add_argument("--max-upload-mb", type=int)
    ns, _ = p.parse_known_args(list(argv))
    runs = ns.runs_dir or env.get(ENV_RUNS_DIR) or "runs"
    cap = ns.max_upload_mb or int(env.get(ENV_MAX_UPLOAD_MB) or data.DEFAULT_MAX_UPLOAD_MB)
    return Path(runs).expanduser().resolve(), cap


def context(argv: Sequence[str]) -> data.Context:
    runs, cap = settings(argv, os.environ)
    up = os.environ.get(ENV_UPLOAD_DIR)
    uploads = Path(up).expanduser().resolve() if up else data.upload_dir()
    uploads.mkdir(parents=True, exist_ok=True)
    return data.Context(roots=Roots(runs_dir=runs, upload_dir=uploads), max_upload_mb=cap)


def one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


def guarded(st: Any, render: Callable[..., None], *args: Any, **kwargs: Any) -> None:
    """Run a page; a phaseprof error becomes its one-line message in an error box, anything else a one-line
    'internal error' box (the page stays alive, no traceback is shown)."""
    try:
        render(st, *args, **kwargs)
    except PhaseprofError as e:
        st.error(md(one_line(e)))
    except Exception as e:  # noqa: BLE001 - the page must never die with a traceback
        if type(e).__name__ in ("RerunException", "StopException"):  # Streamlit control flow
            raise
        st.error(f"internal error ({type(e).__name__}): {md(one_line(e))}")


def _copy(st: Any, src_key: str, dst_key: str) -> None:
    st.session_state[dst_key] = st.session_state[src_key]


def pick(st: Any, sources: list[Source], *, title: str, state: str, default: str | None = None,
         where: Any = None, need_trace: bool = False, help: str | None = None) -> Source | None:
    """A selectbox of sources whose choice lives in ``st.session_state[state]``, so it survives pages that
    do not draw this widget (Streamlit drops the state of widgets a run does not draw)."""
    pool = [s for s in sources if s.has_trace] if need_trace else sources
    if not pool:
        return None
    keys = [s.key for s in pool]
    chosen = st.session_state.get(state)
    if chosen not in keys:
        chosen = default if default in keys else keys[0]
    widget = f"_pick_{state}"
    st.session_state[widget] = chosen
    (where or st).selectbox(title, keys, key=widget, on_change=_copy, args=(st, widget, state), help=help)
    st.session_state[state] = st.session_state[widget]
    return next(s for s in pool if s.key == st.session_state[state])


def current(st: Any, ctx: data.Context, *, need_trace: bool = False) -> Source | None:
    """The run the Breakdown and Timeline pages show (chosen on the Runs page or on either page)."""
    srcs = data.sources(ctx)
    if not srcs:
        st.info(f"Nothing to show yet: no runs, traces or breakdowns under {code(ctx.runs_dir)}. Capture one with "
                "`phaseprof capture`, or add a file on the Runs page.")
        return None
    if need_trace and not any(s.has_trace for s in srcs):
        st.info("Only breakdowns here, no raw trace: the timeline needs a trace.")
        return None
    return pick(st, srcs, title="Run", state="current_run", need_trace=need_trace)


def _empty_cells() -> dict[str, str]:
    import inspect

    import streamlit

    # Missing numbers (a trace with no run.json has no clean TTFT) as empty cells, not "None" (st.dataframe's
    # ``placeholder``; older Streamlit without it keeps its default).
    return {"placeholder": ""} if "placeholder" in inspect.signature(streamlit.dataframe).parameters else {}


EMPTY_CELLS = _empty_cells()


def table(st: Any, df: Any, *, key: str) -> None:
    """A sortable table; numbers keep their values and are only displayed: times (columns in ms) with 2
    decimals, percentages with 1, other numbers with thousands separators."""
    def fmt(c: str) -> str:
        if not str(df[c].dtype).startswith("float"):
            return "localized"
        return "%.2f" if " ms" in f" {c}" else "%.1f" if "%" in c else "localized"

    cfg = {c: st.column_config.NumberColumn(format=fmt(c)) for c in df.columns
           if str(df[c].dtype).startswith(("float", "int"))}
    st.dataframe(df, hide_index=True, width="stretch", key=key, column_config=cfg, **EMPTY_CELLS)


def chart(st: Any, fig: Any, *, key: str) -> None:
    """The one way a plotly figure reaches the page: names in it were escaped with ``text.plot`` when it was
    built, and ``safe_text.plotly_figure`` turns any ``<`` left outside the builders' own ``<br>`` and
    ``<extra></extra>`` into text (a name a builder missed shows as written instead of becoming a link, bold
    text or a styled span that fetches a URL)."""
    import plotly.graph_objects as go

    st.plotly_chart(go.Figure(plotly_figure(fig.to_plotly_json())), key=key)


def source_line(src: Source, bd: Any) -> str:
    """What a source is, in one line of markdown (every name from the trace or the disk escaped)."""
    tr = bd.trace
    bits = [f"**{md(src.key)}**", md(tr.gpu_name or tr.platform), f"{md(tr.device)} trace",
            f"{tr.event_count:,} events"]
    if src.description:
        bits.append(md(src.description))
    return " · ".join(bits)


#: How a phase verdict is boxed: what keeps the GPU idle is a warning, the rest plain information.
VERDICT_BOX = {"host-bound": "warning", "wait-bound": "warning", "profiler-bound": "warning"}


def verdicts(st: Any, v: Any, *, title: str = "What to look at first", prefix: str = "") -> None:
    """The verdicts (``analysis.verdict.Verdicts``) as the page's opening lines: one box per phase (its line as
    ``phaseprof analyze`` prints it), the views' notes under it, then the noise warnings."""
    if v is None or not (v.phases or v.noise):
        return
    st.markdown(f"**{title}**")
    for ph in v.phases:
        getattr(st, VERDICT_BOX.get(ph.bound, "info"))(f"{prefix}{md(ph.line)}")
        for note in ph.views:
            st.caption(md(note))
    for n in v.noise:
        st.warning(f"{prefix}{md(n)}")



def _ms(v: float | None) -> str | None:
    return None if v is None else f"{v:,.2f}"


def record_facts(only: Any) -> Any:
    """What a run.json holds (``records.RecordOnly``'s record), one fact a row, each as the record stores it
    (times in ms: the clean, profiler-off medians the capture measured); facts it does not record are left out."""
    import pandas as pd

    rec = only.record
    req, head, prof, srv = rec.request, rec.headline, rec.profile, rec.server
    request = [req.phase, f"{req.prompt_tokens:,} prompt tokens" if req.prompt_tokens else None,
               f"{req.max_tokens:,} output tokens" if req.max_tokens else None, f"concurrency {req.concurrency}"]
    headline = None
    if head is not None and head.median_ms is not None:
        spread = f" (p10 {_ms(head.p10_ms)}, p90 {_ms(head.p90_ms)})" if head.p10_ms is not None else ""
        headline = f"{head.metric} median {_ms(head.median_ms)} ms{spread}" + (
            f", {head.source}" if head.source else "")
    overhead = None
    if prof is not None and prof.overhead_ratio is not None:
        overhead = f"{prof.overhead_ratio:.2f}x" + (
            f" ({prof.overhead_definition})" if prof.overhead_definition else "")
    rows = {
        "record": only.what, "recorded (UTC)": rec.created_utc, "model": rec.model.name,
        "GPU": rec.device.gpu_name or rec.device.name,
        "vLLM": rec.versions.get("vllm"),
        "server": " ".join(str(x) for x in (srv.url, srv.version) if x) if srv is not None else None,
        "request": ", ".join(x for x in request if x), "headline": headline,
        "TTFT ms (clean median)": _ms(rec.ttft_ms), "TPOT ms (clean median)": _ms(rec.tpot_ms),
        "profiler overhead": overhead, "requests sent": rec.requests_sent, "not kept": ", ".join(only.not_kept),
        "kept beside it": ", ".join(only.kept), "command": " ".join(rec.command),
    }
    return pd.DataFrame([{"fact": k, "value": str(v)} for k, v in rows.items() if v not in (None, "")])


def run_record(st: Any, only: Any, *, key: str) -> None:
    """A run that kept only its record (``records.RecordOnly``): why there is nothing to analyse (the line
    ``phaseprof analyze`` of it prints), its clean timings, and what else the record holds."""
    st.info(md(only.line))
    clean = {k: v for k, v in (("TTFT (clean, ms)", only.record.ttft_ms), ("TPOT (clean, ms)", only.record.tpot_ms))
             if v is not None}
    if clean:
        for c, (k, v) in zip(st.columns(4), clean.items()):
            c.metric(k, f"{v:,.2f}")
    st.dataframe(record_facts(only), hide_index=True, width="stretch", key=key)
