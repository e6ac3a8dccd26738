"""The one run-record builder of every capture path: in-process, multi-GPU and a live server.

What every capture's ``run.json`` says the same way is filled here from the capture request (``CaptureOptions``)
and its clean timing (``PhaseTiming``): when and how it ran (``created_utc``, ``command``), the request, the
headline (``Phase.metric``: TTFT for prefill, TPOT for decode) and the clean medians. Each path adds what only it
knows (engine, device, profile, trace, ranks, server) as ``RunRecord`` fields.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from phaseprof.capture.shared.options import CaptureOptions
from phaseprof.capture.shared.rundir import command_line
from phaseprof.capture.shared.timing import PhaseTiming
from phaseprof.records import Headline, RequestInfo, RunRecord


def capture_record(req: CaptureOptions, clean: PhaseTiming | None, /, *, argv: list[str] | None,
                   clock: str | None = None, prompt: str | None = None, **fields: Any) -> RunRecord:
    """``req``'s run record. ``clean``: the headline's clean timing (None: the path has no ``PhaseTiming`` and
    passes ``ttft_ms``/``tpot_ms``/``timing`` itself); ``clock``: the headline's source when it is not
    ``clean.source`` (a server's client clock); ``prompt``: how the prompts were made, when not the default;
    ``fields``: the path's own ``RunRecord`` fields (they win over the ones built here)."""
    request = RequestInfo(phase=str(req.phase), prompt_tokens=req.prompt_tokens, max_tokens=req.max_tokens,
                          concurrency=req.concurrency, seed=req.seed,
                          **({} if prompt is None else {"prompt": prompt}))
    doc: dict[str, Any] = {
        "created_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": command_line(argv), "request": request,
    }
    if clean is not None:
        head = clean.headline
        doc.update(
            # Clean (profiler-off) medians as plain top-level numbers, the names `phaseprof diff` and the dashboard
            # read.
            ttft_ms=clean.ttft.median_ms, tpot_ms=clean.tpot.median_ms if clean.tpot else None,
            headline=Headline(metric=req.phase.metric, median_ms=head.median_ms, p10_ms=head.p10_ms,
                              p90_ms=head.p90_ms, source=clock or clean.source),
            timing=clean.to_dict())
    return RunRecord(**{**doc, **fields})
