"""Where each work item name sits inside its step: the order evidence ``phaseprof diff`` matches kernels by."""

from __future__ import annotations

import pandas as pd

from phaseprof.analysis.prepare import Prepared

#: phase -> work item name -> median position of its first occurrence in the step (0 = first item, 1 = last).
KernelOrder = dict[str, dict[str, float]]


def kernel_order_of(prep: Prepared) -> KernelOrder:
    """Per phase, each work item name's median position of first occurrence in its step (0 = the step's
    first item by start time, 1 = its last), over the steps where it occurs."""
    items = prep.items
    if items.empty:
        return {}
    # A frame of its own: the shared items table is never given extra columns.
    it = pd.DataFrame({"step": items["step"].to_numpy(), "ts_ns": items["ts_ns"].to_numpy(),
                       "name": items["name"].astype(str).to_numpy()})
    it = it.sort_values(["step", "ts_ns"], kind="stable")
    g = it.groupby("step")
    it["pos"] = g.cumcount() / (g["step"].transform("size") - 1).clip(lower=1)
    first = it.groupby(["step", "name"])["pos"].min().reset_index()
    steps = prep.detection.steps
    first["phase"] = [str(steps[int(k)].phase) for k in first["step"]]
    out: KernelOrder = {}
    for (ph, name), v in first.groupby(["phase", "name"])["pos"].median().items():
        out.setdefault(str(ph), {})[str(name)] = float(v)
    return out
