"""phaseprof: where every microsecond of a vLLM prefill and decode step goes."""

__version__ = "0.1.0"
