"""The handoff table of a disaggregated capture in the terminal (80 columns): the medians, then every request."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from phaseprof.disagg.records import HandoffReport, Median, ProfiledTimeline
from phaseprof.safe_text import deep, plain


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v + 0.0:.2f}"  # + 0.0: -0.0 prints as 0.00


def _mb(v: float | None) -> str:
    return "-" if v is None else f"{v / 1e6 + 0.0:.1f}"


def _ratio(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.0f}x" if v >= 100 else f"{v:.1f}x" if v >= 10 else f"{v:.3f}x"


def split_cents(prefill_ms: float, ttft_ms: float) -> tuple[float, float, float]:
    """(prefill, handoff, TTFT) as printed, in ms rounded to 0.01: TTFT and prefill rounded, handoff the
    rounded difference (its definition: the first token minus the prefill answer), so every printed row adds up
    to the cent. The stored handoff_ms differs from it by at most 0.01 ms."""
    p, t = round(prefill_ms, 2), round(ttft_ms, 2)
    return p, round(t - p, 2), t


def ttft_lines(m: Median) -> list[str]:
    """The TTFT as a sum: the median request's parts (``Median``: one request, so they add up), the means (a
    sum too), then the decode server's median TPOT."""
    who = f"request #{m.request}" if m.request is not None else "stored centre"
    p, h, t = split_cents(m.prefill_ms, m.ttft_ms)
    lines = [f"median of {m.requests} timed requests by TTFT ({who}): TTFT {_ms(t)} ms",
             f"  = prefill {_ms(p)} ms + handoff to the first token {_ms(h)} ms"]
    if m.mean_ttft_ms is not None and m.mean_prefill_ms is not None:
        p, h, t = split_cents(m.mean_prefill_ms, m.mean_ttft_ms)
        lines.append(f"mean of the {m.requests}: TTFT {_ms(t)} ms = prefill {_ms(p)} + handoff {_ms(h)}")
    return [*lines, f"  TPOT {_ms(m.tpot_ms)} ms on the decode server (median of its column)"]


def summary_lines(r: HandoffReport) -> list[str]:
    """The medians and the model, one fact per line (each within 80 columns for the usual names). The run's own
    strings (model, connector, link, notes: a server's answers) come out without control characters or line
    breaks (``safe_text.plain``); a markdown view fences them (``safe_text.code_block``)."""
    r = deep(r, plain)
    m = r.median
    lines = [f"PD run of {r.model}, {r.connector or 'connector not reported'}: {r.prompt_tokens} prompt + "
             f"{r.output_tokens} output tokens"]
    if r.prefill_computed_tokens != r.prompt_tokens:
        lines.append(f"  the prefill server computes {r.prefill_computed_tokens} prompt tokens, the decode server "
                     f"the last {r.prompt_tokens - r.prefill_computed_tokens}")
    lines += ttft_lines(m)
    if m.xfer_ms is not None:
        lines.append(f"NIXL transfer {_ms(m.xfer_ms)} ms (median): {_mb(m.bytes)} MB in {m.descriptors} "
                     "descriptors")
    if r.modelled is not None:
        h = r.modelled
        lines += [f"modelled: {_mb(h.bytes)} MB (KV {_mb(h.attention_bytes)} + GDN state {_mb(h.gdn_bytes)}), "
                  f"{_ms(h.transfer_ms)} ms",
                  f"  over {h.link} at {h.link_gb_per_s:g} GB/s"]
        if r.bytes_ratio is not None or r.time_ratio is not None:
            lines.append(f"measured / modelled: bytes {_ratio(r.bytes_ratio)}, time {_ratio(r.time_ratio)}")
    elif r.model_note:
        lines.append(f"no model: {r.model_note}")
    return lines + list(r.notes)


def timeline_cents(t: ProfiledTimeline) -> dict[str, float | None]:
    """The timeline's parts as printed (ms rounded to 0.01, keyed by ``ProfiledTimeline`` field): the rest is
    the remainder of the rounded TTFT, so the parts add up to ``ttft_ms`` to the cent in every view."""
    parts: dict[str, float | None] = {"prefill_step_ms": round(t.prefill_step_ms, 2),
                                      "xfer_ms": None if t.xfer_ms is None else round(t.xfer_ms, 2),
                                      "decode_first_step_ms": round(t.decode_first_step_ms, 2)}
    total = round(t.ttft_ms, 2)
    parts["other_ms"] = round(total - sum(v for v in parts.values() if v is not None), 2)
    return {"ttft_ms": total, **parts}


def timeline_lines(t: ProfiledTimeline | None, note: str | None) -> list[str]:
    """The profiled request's TTFT laid out over both traces and the connector."""
    if t is None:
        return [f"profiled request: no timeline ({plain(note)})"] if note else []
    tokens = "" if t.decode_first_step_tokens is None else f", {t.decode_first_step_tokens} token(s)"
    c = timeline_cents(t)
    return [f"profiled request #{t.request} (under the profiler): TTFT {_ms(c['ttft_ms'])} ms =",
            f"  prefill server, {t.prefill_steps} step(s)  {_ms(t.prefill_step_ms):>9} ms  (GPU busy "
            f"{_ms(t.prefill_gpu_ms)})",
            f"  NIXL transfer                {_ms(t.xfer_ms):>9} ms",
            f"  decode server, first step    {_ms(t.decode_first_step_ms):>9} ms  (GPU busy "
            f"{_ms(t.decode_first_gpu_ms)}{tokens})",
            f"  rest (HTTP, scheduling)      {_ms(c['other_ms']):>9} ms"]


def requests_table(r: HandoffReport) -> Table:
    t = Table(title="Requests (ms; MB read by the decode server)", title_justify="left")
    for name in ("#", "profiled", "prefill", "handoff", "TTFT", "TPOT", "xfer", "MB"):
        t.add_column(name, justify="left" if name == "profiled" else "right")
    for q in r.requests:
        n = q.nixl
        p, h, tt = split_cents(q.prefill_ms, q.ttft_ms)
        t.add_row(str(q.index), "yes" if q.profiled else "", _ms(p), _ms(h), _ms(tt),
                  _ms(q.tpot_ms), _ms(n.xfer_ms if n else None), _mb(n.bytes if n else None))
    return t


def print_handoff(r: HandoffReport, console: Console) -> None:
    for line in summary_lines(r):
        console.print(line, markup=False, highlight=False)
    console.print(requests_table(r))
