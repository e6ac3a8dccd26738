"""Roofline chart of a breakdown's sol section: buckets as points (arithmetic intensity vs achieved TFLOP/s),
the ceiling as lines (memory slope up to the ridge point, then the compute roof). ``roofline_data`` is plain
data for any front end (the dashboard draws it: ``dashboard/charts.roofline``)."""

from __future__ import annotations

from dataclasses import dataclass

from phaseprof.analysis.sol_results import SolSection

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

