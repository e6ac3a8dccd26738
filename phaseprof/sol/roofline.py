"""Roofline chart of a breakdown's sol section: buckets as points (arithmetic intensity vs achieved TFLOP/s),
the ceiling as lines (memory slope up to the ridge point, then the compute roof). ``roofline_data`` is plain
data (for any front end); ``roofline_figure`` builds the plotly figure (the dashboard extra)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from phaseprof.sol.results import SolSection

#: Points with no FLOPs (norm, elementwise: bytes only) sit at this intensity so a log axis can show them.
MIN_INTENSITY = 1e-2


@dataclass(frozen=True)
class RooflinePoint:
    phase: str
    bucket: str
    intensity_flop_per_byte: float
    achieved_tflops: float
    achieved_tbps: float
    pct_of_light: float | None
    time_ms: float


@dataclass(frozen=True)
class RooflineData:
    gpu: str
    kind: str  # "spec" | "measured"
    precision: str
    peak_tflops: float
    hbm_tbps: float
    ridge_flop_per_byte: float
    points: list[RooflinePoint]

    def roof(self, intensity: float) -> float:
        """Attainable TFLOP/s at ``intensity`` FLOP/byte: min(peak, intensity × bandwidth)."""
        return min(self.peak_tflops, intensity * self.hbm_tbps)


def roofline_data(sol: SolSection) -> RooflineData | None:
    """None when the section has no numbers (no model config or no ceiling)."""
    if not sol.ok or sol.ceiling is None:
        return None
    c = sol.ceiling
    pts = [RooflinePoint(ph.phase, b.bucket, max(b.intensity_flop_per_byte, MIN_INTENSITY), b.achieved_tflops,
                         b.achieved_tbps, b.pct_of_light, b.time_us / 1e3)
           for ph in sol.phases for b in ph.buckets if b.time_us > 0]
    return RooflineData(c.gpu, c.kind, c.precision, c.tflops, c.hbm_tbps, c.ridge_flop_per_byte, pts)


def roofline_figure(sol: SolSection, *, colors: dict[str, str] | None = None) -> Any:
    """A plotly figure (log-log): the roof as a line, one marker per phase and bucket (FLOP-less buckets are
    drawn at their achieved TB/s × ``MIN_INTENSITY``, i.e. on the memory side)."""
    import plotly.graph_objects as go

    data = roofline_data(sol)
    fig = go.Figure()
    if data is None:
        fig.update_layout(title=f"roofline: {sol.status}")
        return fig
    lo = min([MIN_INTENSITY] + [p.intensity_flop_per_byte for p in data.points])
    hi = max([data.ridge_flop_per_byte * 10] + [p.intensity_flop_per_byte * 2 for p in data.points])
    xs = [lo, data.ridge_flop_per_byte, hi]
    fig.add_scatter(x=xs, y=[data.roof(x) for x in xs], mode="lines", name=f"{data.gpu} ({data.kind}) roof",
                    line=dict(color="black", width=2),
                    hovertext=[f"{data.hbm_tbps:g} TB/s", f"ridge {data.ridge_flop_per_byte:.0f} FLOP/B",
                               f"{data.peak_tflops:,.0f} TFLOP/s {data.precision}"], hoverinfo="text")
    symbols = {"prefill": "circle", "decode": "diamond", "mixed": "square"}
    for ph in dict.fromkeys(p.phase for p in data.points):
        pts = [p for p in data.points if p.phase == ph]
        y = [p.achieved_tflops if p.achieved_tflops > 0 else p.achieved_tbps * p.intensity_flop_per_byte for p in pts]
        fig.add_scatter(
            x=[p.intensity_flop_per_byte for p in pts], y=y, mode="markers+text", name=ph,
            text=[p.bucket for p in pts], textposition="top center",
            marker=dict(size=11, symbol=symbols.get(ph, "circle"),
                        color=[(colors or {}).get(p.bucket, "#555555") for p in pts]),
            hovertext=[f"{p.bucket} ({ph}): {p.achieved_tflops:,.1f} TFLOP/s, {p.achieved_tbps:.2f} TB/s, "
                       f"{p.time_ms:,.2f} ms, {'-' if p.pct_of_light is None else f'{p.pct_of_light:.0f}'}% "
                       "of light" for p in pts], hoverinfo="text")
    fig.update_xaxes(type="log", title="arithmetic intensity (FLOP/byte)")
    fig.update_yaxes(type="log", title="achieved TFLOP/s")
    fig.update_layout(title=f"roofline on {data.gpu} ({data.kind})", template="plotly_white", height=460,
                      margin=dict(l=10, r=10, t=50, b=10))
    return fig
