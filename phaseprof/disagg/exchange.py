"""One disaggregated request, proxied the way vLLM's PD examples do (``toy_proxy_server.py``, NixlConnector):

1. the prefill server gets the prompt with ``max_tokens`` 1, no stream, and ``kv_transfer_params`` asking it to
   keep the KV blocks (and a hybrid model's GDN state) for a remote decode (``do_remote_decode``);
2. its answer carries the ``kv_transfer_params`` that locate them (engine id, block ids, host, port);
3. the decode server gets the same prompt and those parameters, reads the blocks over the connector and streams
   the output.

Times are taken on this process' ``perf_counter`` (the proxy's clock). The decode server's NIXL counters
(``nixl_metrics``) are read before and after each request, so requests run one at a time.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from phaseprof.capture.server.client import ServerClient, ServerError, StreamedRequest, error_message
from phaseprof.disagg.nixl_metrics import NixlCounters, parse_counters
from phaseprof.disagg.records import HandoffRequest, NixlTransfer
from phaseprof.errors import PhaseprofError

#: What the prefill request asks of the connector (vLLM's toy proxy sends exactly these keys).
TO_PREFILL = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
              "remote_block_ids": None, "remote_host": None, "remote_port": None}
#: How long the decode server's counters may lag behind the end of its stream (they reach /metrics with the
#: engine's next stats update).
COUNTER_WAIT_S = 5.0


@dataclass(frozen=True)
class PdPair:
    """The prefill and decode servers, one client each."""

    prefill: ServerClient
    decode: ServerClient


def prefill_body(body: dict[str, Any]) -> dict[str, Any]:
    """The prefill server's request: the same prompt, one token, no stream, the connector's parameters."""
    out = {k: v for k, v in body.items() if k not in ("stream_options", "min_tokens", "stream")}
    return {**out, "max_tokens": 1, "stream": False, "kv_transfer_params": dict(TO_PREFILL)}


def read_counters(client: ServerClient) -> NixlCounters:
    """The decode server's NIXL totals now (``present`` False when it exports none or /metrics is off)."""
    resp = client.request("GET", "/metrics")
    if resp.status != 200:
        return NixlCounters(present=False)
    return parse_counters(resp.body.decode("utf-8", "replace"))


def _settled(client: ServerClient, before: NixlCounters) -> NixlCounters:
    """The counters once this request's transfer shows (or after ``COUNTER_WAIT_S``)."""
    deadline = time.monotonic() + COUNTER_WAIT_S
    while True:
        now = read_counters(client)
        if not now.present or now.count > before.count or time.monotonic() > deadline:
            return now
        time.sleep(0.05)


def kv_params(answer: Any, url: str) -> dict[str, Any]:
    """The prefill server's ``kv_transfer_params``; one line saying what is wrong when there are none."""
    params = answer.get("kv_transfer_params") if isinstance(answer, dict) else None
    if not isinstance(params, dict) or not params.get("remote_engine_id"):
        raise PhaseprofError(f"{url} answered the prefill request without kv_transfer_params: it runs no KV "
                             "connector; start both servers with --kv-transfer-config "
                             "'{\"kv_connector\":\"NixlConnector\",\"kv_role\":\"kv_both\"}'")
    return params


def run_request(pair: PdPair, body: dict[str, Any], *, index: int, profiled: bool,
                prompt_tokens: int, notes: list[str] | None = None) -> HandoffRequest:
    """Send one request through prefill then decode and time its parts (``records.TTFT_SPLIT_DEFINITION``).
    A NIXL transfer that is no fact (counters that went down or out of range) is left out, saying why in
    ``notes``."""
    before = read_counters(pair.decode)
    t0 = time.perf_counter()
    resp = pair.prefill.request("POST", "/v1/completions", prefill_body(body))
    t1 = time.perf_counter()
    if resp.status != 200:
        raise ServerError(f"{pair.prefill.endpoint.url} rejected the prefill request (HTTP {resp.status}): "
                          f"{error_message(resp)}")
    params = kv_params(resp.json(), pair.prefill.endpoint.url)
    streamed: StreamedRequest = pair.decode.stream_completion({**body, "kv_transfer_params": params})
    nixl: NixlTransfer | None = None
    if before.present:
        nixl, why = _settled(pair.decode, before).since(before)
        if why and notes is not None:
            notes.append(f"request {index}: {why}; its transfer is not shown")
    first = streamed.chunk_t_s[0]
    tpot = streamed.tpot_s
    return HandoffRequest(index=index, profiled=profiled, prompt_tokens=prompt_tokens,
                          output_tokens=streamed.output_tokens, prefill_ms=(t1 - t0) * 1e3,
                          handoff_ms=(first - t1) * 1e3, ttft_ms=(first - t0) * 1e3,
                          tpot_ms=None if tpot is None else tpot * 1e3, nixl=nixl)
