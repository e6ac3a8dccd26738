"""One way to compare GPU names: the datasheet's ``H100-SXM5-80GB``, a user's ``h100 sxm5 80gb`` and a
measured-ceilings file's ``NVIDIA H200`` against a trace's ``NVIDIA H200`` are equal when their keys are."""

from __future__ import annotations

import re


def gpu_key(name: str) -> str:
    """``name`` without spaces, dashes and underscores, upper-cased: the key GPU names are compared by."""
    return re.sub(r"[\s_\-]+", "", name).upper()
