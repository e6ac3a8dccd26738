"""The typed record of a disaggregated (PD) capture's ``handoff.json``, defined once here (msgspec Structs),
with its committed schema ``handoff.schema.json`` (``python -m phaseprof.commands.schemas``).

Imports only ``errors``, ``records`` (its bounded reader) and ``pareto.records`` (the planner's ``Handoff``
model): capture, analysis and dashboard all read it without importing each other.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any, Literal

import msgspec

from phaseprof.errors import PhaseprofError
from phaseprof.pareto.records import Handoff
from phaseprof.records import read_json_object

HANDOFF_SCHEMA_VERSION = 2
HANDOFF_SCHEMA_PATH = Path(__file__).with_name("handoff.schema.json")

#: How the TTFT of a disaggregated request splits, on the client clock (the proxy's: this process).
TTFT_SPLIT_DEFINITION = (
    "prefill_ms: prefill request sent to the prefill server -> its answer (the prompt's KV blocks and GDN state "
    "are computed and held for the decode server); handoff_ms: that answer -> the decode server's first token "
    "(the decode server reads the KV blocks and GDN state over the connector, recomputes the last prompt token "
    "and samples; plus both HTTP hops); ttft_ms = prefill_ms + handoff_ms")


class NixlTransfer(msgspec.Struct, frozen=True, kw_only=True):
    """What the decode server's NixlConnector counted while one request ran (the difference of its Prometheus
    histograms ``vllm:nixl_*`` before and after; requests run one at a time, so it is that request's alone).
    ``xfer_ms``: NIXL's transfer duration (post to completion, summed over the request's transfers);
    ``post_ms``: time to post them; ``bytes``: bytes read; ``descriptors``: memory regions read."""

    transfers: int
    bytes: int
    xfer_ms: float
    post_ms: float
    descriptors: int
    failed: int


class HandoffRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One disaggregated request (``TTFT_SPLIT_DEFINITION``); ``profiled``: it ran while both servers'
    profilers recorded. ``tpot_ms``: decode server's mean time per output token after the first."""

    index: int
    profiled: bool
    prompt_tokens: int
    output_tokens: int
    prefill_ms: float
    handoff_ms: float
    ttft_ms: float
    tpot_ms: float | None
    nixl: NixlTransfer | None


class Median(msgspec.Struct, frozen=True, kw_only=True):
    """The centre of the timed (not profiled) requests, so that every printed sum adds up.

    - ``request``: the index of the median request by TTFT (the lower of the two middle ones for an even
      count); ``prefill_ms`` / ``handoff_ms`` / ``ttft_ms``: that one request's parts, so prefill + handoff =
      TTFT (the proxy's clock: ``TTFT_SPLIT_DEFINITION``). Medians of each column on their own would come from
      different requests and not add up.
    - ``mean_prefill_ms`` / ``mean_handoff_ms`` / ``mean_ttft_ms``: means over the same requests (a sum too).
    - ``tpot_ms``, ``xfer_ms``, ``bytes``, ``descriptors``: medians of each column on its own (no sum is made
      of them). Schema 1 records stored column medians throughout; ``centre`` re-derives them on reading.
    """

    requests: int
    request: int | None = None
    prefill_ms: float
    handoff_ms: float
    ttft_ms: float
    mean_prefill_ms: float | None = None
    mean_handoff_ms: float | None = None
    mean_ttft_ms: float | None = None
    tpot_ms: float | None
    xfer_ms: float | None
    bytes: int | None
    descriptors: int | None

    @property
    def rest_ms(self) -> float:
        """TTFT minus its two parts: zero up to float rounding on the proxy's one clock."""
        return self.ttft_ms - self.prefill_ms - self.handoff_ms


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def centre(rows: list[HandoffRequest]) -> Median:
    """``Median`` of ``rows`` (the timed requests): the median request's split, the means, the column medians."""
    if not rows:
        raise PhaseprofError("no timed request: a PD record needs at least one to summarise")
    mid = sorted(rows, key=lambda r: (r.ttft_ms, r.index))[(len(rows) - 1) // 2]
    nixl = [r.nixl for r in rows if r.nixl is not None and r.nixl.transfers > 0]
    by = _median([float(n.bytes) for n in nixl])
    ds = _median([float(n.descriptors) for n in nixl])
    return Median(requests=len(rows), request=mid.index, prefill_ms=mid.prefill_ms, handoff_ms=mid.handoff_ms,
                  ttft_ms=mid.ttft_ms, mean_prefill_ms=statistics.fmean(r.prefill_ms for r in rows),
                  mean_handoff_ms=statistics.fmean(r.handoff_ms for r in rows),
                  mean_ttft_ms=statistics.fmean(r.ttft_ms for r in rows),
                  tpot_ms=_median([r.tpot_ms for r in rows if r.tpot_ms is not None]),
                  xfer_ms=_median([n.xfer_ms for n in nixl]), bytes=None if by is None else round(by),
                  descriptors=None if ds is None else round(ds))


class HandoffReport(msgspec.Struct, frozen=True, kw_only=True):
    """``handoff.json`` of a disaggregated capture.

    - ``requests``: every request, timed and profiled (``HandoffRequest``); ``median``: over the timed ones.
    - ``modelled``: the planner's handoff for the tokens the prefill server computes (``pareto.records.Handoff``,
      a MODEL) over a link of the catalogue (``phaseprof/gpus.toml`` ``[[link]]``); None with ``model_note`` when
      the memory plan cannot model this engine.
    - ``bytes_ratio`` / ``time_ratio``: measured median / modelled (NIXL bytes and transfer time).
    """

    schema_version: int = HANDOFF_SCHEMA_VERSION
    kind: Literal["pd_handoff"] = "pd_handoff"
    prefill_url: str
    decode_url: str
    connector: str | None
    model: str
    prompt_tokens: int
    prefill_computed_tokens: int
    output_tokens: int
    ttft_split: str = TTFT_SPLIT_DEFINITION
    requests: list[HandoffRequest]
    median: Median
    modelled: Handoff | None = None
    model_note: str | None = None
    bytes_ratio: float | None = None
    time_ratio: float | None = None
    notes: list[str] = []

    def to_dict(self) -> dict[str, Any]:
        return msgspec.to_builtins(self)


class ProfiledTimeline(msgspec.Struct, frozen=True, kw_only=True):
    """The profiled request's TTFT laid out from both traces and the connector (one profiled request only: its
    steps are the only ones in the traces). ``prefill_step_ms`` / ``prefill_gpu_ms``: the prefill server's
    prefill steps (wall, GPU busy); ``xfer_ms``: NIXL's transfer; ``decode_first_step_ms`` / ``_gpu_ms``: the
    decode server's first step, which computes ``decode_first_step_tokens`` prompt tokens (the last one, for a
    hybrid model under NixlConnector) and samples the first token; ``other_ms``: TTFT minus those three (HTTP,
    scheduling, waiting for the transfer to be noticed). Traced steps run under the profiler, so they are
    slower than the timed requests."""

    request: int
    ttft_ms: float
    prefill_step_ms: float
    prefill_gpu_ms: float
    prefill_steps: int
    xfer_ms: float | None
    decode_first_step_ms: float
    decode_first_gpu_ms: float
    decode_first_step_tokens: int | None
    other_ms: float


def read_handoff(path: Path) -> HandoffReport:
    """``handoff.json`` typed and checked (:func:`checked`), its ``median`` then re-derived from its timed
    requests (``centre``: a schema-1 record's column medians do not add up); one PhaseprofError naming the file
    when it is not one."""

    doc = read_json_object(path, "handoff.json")  # bounded, regular files only
    try:
        report = msgspec.convert(doc, HandoffReport)
    except msgspec.ValidationError as e:
        raise PhaseprofError(f"not a PD handoff record: {e}", path=path) from None
    report = checked(report, path=path)  # transfers that are no facts dropped before they enter the centre
    timed = [r for r in report.requests if not r.profiled]
    if not timed:
        return report  # nothing to re-derive from: the stored centre as written
    notes = [n for n in report.notes if not n.startswith("the median NIXL transfer is no fact")]  # re-derived
    return msgspec.structs.replace(report, median=centre(timed), notes=notes, schema_version=HANDOFF_SCHEMA_VERSION)


#: Largest count or byte total taken from a record or a server's counters: 2^53, where a float stops holding
#: every integer (a NIXL counter of 1e300 is no transfer; as an int it does not fit JSON's int64 either).
MAX_COUNT = float(1 << 53)


def transfer_problem(t: NixlTransfer) -> str | None:
    """Why a NIXL transfer's numbers cannot be facts (a counter went down between two readings: the server
    restarted or reset its metrics; or a value is not a finite amount in range), or None when they can."""
    values = {k: getattr(t, k) for k in t.__struct_fields__}
    if any(not math.isfinite(v) or abs(v) > MAX_COUNT for v in values.values()):
        return "a NIXL counter out of range"
    down = [k for k, v in values.items() if v < 0]
    if down:
        return (f"the decode server's NIXL counters went down ({', '.join(down)}): a server restart or a counter "
                "reset, not a transfer")
    return None


def _negative(obj: Any, where: str) -> str | None:
    """The first number under ``obj`` (a Struct, list, or number) that is negative or not finite, as
    ``where.field = value``; None when every one is a quantity."""
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return None
    if isinstance(obj, (int, float)):
        return None if math.isfinite(obj) and 0 <= obj <= MAX_COUNT * 1e3 else f"{where} = {obj!r}"
    if isinstance(obj, list):
        return next((b for i, x in enumerate(obj) if (b := _negative(x, f"{where}[{i}]"))), None)
    fields = getattr(type(obj), "__struct_fields__", ())
    return next((b for f in fields if (b := _negative(getattr(obj, f), f"{where}.{f}" if where else f))), None)


def checked(r: HandoffReport, *, path: Path | None = None) -> HandoffReport:
    """``r`` with its numbers known to be quantities. A request's NIXL transfer that is no fact (counters that
    went down, a value out of range: :func:`transfer_problem`) is dropped with a note, and so are the medians and
    ratios built from such transfers; any other negative or non-finite number (a time, a token count, the model)
    is one PhaseprofError naming the file and the field."""
    notes = list(r.notes)
    requests = []
    for q in r.requests:
        why = transfer_problem(q.nixl) if q.nixl is not None else None
        if why:
            notes.append(f"request {q.index}: {why}; its transfer is not shown")
            q = msgspec.structs.replace(q, nixl=None)
        requests.append(q)
    m = r.median
    if any(v is not None and not 0 <= v <= MAX_COUNT for v in (m.xfer_ms, m.bytes, m.descriptors)):
        notes.append("the median NIXL transfer is no fact (a counter went down or out of range): not shown, nor "
                     "its ratios to the model")
        m = msgspec.structs.replace(m, xfer_ms=None, bytes=None, descriptors=None)
    ratios = {k: getattr(r, k) for k in ("bytes_ratio", "time_ratio")}
    for k, v in ratios.items():
        if v is not None and (m.xfer_ms is None or not (math.isfinite(v) and v >= 0)):
            ratios[k] = None
            if m.xfer_ms is not None:
                notes.append(f"{k} is negative: no ratio of two amounts, not shown")
    out = msgspec.structs.replace(r, requests=requests, median=m, notes=notes, **ratios)
    bad = _negative(msgspec.structs.replace(out, notes=[]), "")
    if bad:
        raise PhaseprofError(f"not a PD handoff record: {bad} (times, sizes and counts are never negative)",
                             path=path)
    for q in out.requests:  # TTFT = prefill + handoff: a first token before its prefill answer is no request
        if q.ttft_ms < q.prefill_ms:
            raise PhaseprofError(f"not a PD handoff record: request {q.index}'s TTFT {q.ttft_ms:g} ms is below its "
                                 f"prefill {q.prefill_ms:g} ms (the TTFT contains the prefill)", path=path)
    return out


def handoff_schema() -> dict[str, Any]:
    """JSON Schema (2020-12) of ``HandoffReport`` (the committed ``handoff.schema.json``)."""
    doc = msgspec.json.schema(HandoffReport)
    doc["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return doc
