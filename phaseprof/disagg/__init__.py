"""Prefill/decode disaggregation, measured: one request at a time through a prefill and a decode vLLM server
joined by a KV connector (NixlConnector), both profiled; the per-request handoff table next to the planner's
model of it (``pareto/disagg.py``)."""
