"""Facts about the real H200 captures in traces/h200, read from the raw events and compared with phaseprof."""
