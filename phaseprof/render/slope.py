"""How a prefill sweep's least-squares TTFT slope is said (``sweep --show``, ``sweep --server``, the dashboard's
Sweep page): a slope is stated as a cost per prompt token only when it is one."""

from __future__ import annotations


def slope_text(slope_us_per_token: float) -> str:
    """The slope in words. Positive: "12.34 µs per prompt token (least squares)". Zero or negative: TTFT did not
    grow with the prompt over the swept lengths, so the fit says nothing about a cost per token (timing noise
    larger than the prompt's cost, or a fixed cost that hides it); the number is kept, labelled as such."""
    if slope_us_per_token > 0:
        return f"{slope_us_per_token:,.2f} µs per prompt token (least squares)"
    return (f"no meaningful fit: TTFT does not grow with the prompt length over these points (least-squares "
            f"slope {slope_us_per_token:,.2f} µs per token: noise, not a cost)")
