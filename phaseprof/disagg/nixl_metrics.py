"""The decode server's NixlConnector counters, read from its Prometheus ``/metrics`` text (vLLM's
``NixlPromMetrics``: ``vllm:nixl_xfer_time_seconds``, ``vllm:nixl_post_time_seconds``,
``vllm:nixl_bytes_transferred``, ``vllm:nixl_num_descriptors`` histograms and the failure counters), summed over
label sets; the difference of two readings is what happened in between (``NixlTransfer``)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from phaseprof.disagg.records import MAX_COUNT, NixlTransfer, transfer_problem

_HISTOGRAMS = {"xfer_s": "vllm:nixl_xfer_time_seconds", "post_s": "vllm:nixl_post_time_seconds",
               "bytes": "vllm:nixl_bytes_transferred", "descriptors": "vllm:nixl_num_descriptors"}
_FAILED = "vllm:nixl_num_failed_transfers"
#: one sample line: name{labels} value (Prometheus text format; labels never hold a newline)
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^\n]*\})?[ \t]+(\S+)", re.M)


@dataclass(frozen=True)
class NixlCounters:
    """Totals since the server started: ``count`` transfers; sums of their durations (s), bytes, descriptors;
    ``failed`` failed transfers. ``present``: the server exports NIXL metrics at all."""

    present: bool
    count: float = 0.0
    xfer_s: float = 0.0
    post_s: float = 0.0
    bytes: float = 0.0
    descriptors: float = 0.0
    failed: float = 0.0

    def since(self, before: NixlCounters) -> tuple[NixlTransfer | None, str | None]:
        """(what moved between ``before`` and this reading, None) or (None, why it is no fact): a counter that
        went down (a server restart, a reset) or one out of range (``records.transfer_problem``)."""
        d = {k: getattr(self, k) - getattr(before, k) for k in ("count", "bytes", "xfer_s", "post_s", "descriptors",
                                                                 "failed")}
        if any(not math.isfinite(v) or abs(v) > MAX_COUNT for v in d.values()):  # round(1e300) fits no int64
            return None, "a NIXL counter out of range"
        t = NixlTransfer(transfers=round(d["count"]), bytes=round(d["bytes"]), xfer_ms=d["xfer_s"] * 1e3,
                         post_ms=d["post_s"] * 1e3, descriptors=round(d["descriptors"]), failed=round(d["failed"]))
        why = transfer_problem(t)
        return (None, why) if why else (t, None)


def parse_counters(text: str) -> NixlCounters:
    """The NIXL totals in one ``/metrics`` answer (``present`` False when it has none)."""
    sums: dict[str, float] = {}
    for m in _SAMPLE.finditer(text):
        name, raw = m.group(1), m.group(2)
        if not name.startswith("vllm:nixl_"):
            continue
        try:
            v = float(raw)
        except ValueError:
            continue
        if math.isfinite(v):
            sums[name] = sums.get(name, 0.0) + v
    if not sums:
        return NixlCounters(present=False)
    get = lambda key: sums.get(key, 0.0)  # noqa: E731
    return NixlCounters(present=True, count=get(_HISTOGRAMS["xfer_s"] + "_count"),
                        xfer_s=get(_HISTOGRAMS["xfer_s"] + "_sum"), post_s=get(_HISTOGRAMS["post_s"] + "_sum"),
                        bytes=get(_HISTOGRAMS["bytes"] + "_sum"), descriptors=get(_HISTOGRAMS["descriptors"] + "_sum"),
                        failed=get(_FAILED + "_total") or get(_FAILED))
