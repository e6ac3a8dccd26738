"""Collect vLLM's log messages while the engine starts; the facts in them are parsed by ``phaseprof.vllm_log``
(the one parser for vLLM's startup lines, shared with the memory plan)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from phaseprof.vllm_log import PATTERNS, StartupFacts, parse_facts

__all__ = ["PATTERNS", "AttachedCollector", "StartupFacts", "VllmLogCollector", "parse_facts"]


class VllmLogCollector(logging.Handler):
    """A handler on the ``vllm`` logger that keeps every message (for facts) and reports the latest one.

    ``on_message`` (optional) gets each message, e.g. to show it under a progress spinner.
    """

    def __init__(self, on_message: Callable[[str], None] | None = None) -> None:
        super().__init__(level=logging.DEBUG)
        self.messages: list[str] = []
        self._lock_msgs = threading.Lock()
        self.on_message = on_message

    def emit(self, record: logging.LogRecord) -> None:
        try:
            msg = record.getMessage()
        except Exception:  # a malformed record must never break the engine
            return
        with self._lock_msgs:
            self.messages.append(msg)
        if self.on_message is not None:
            try:
                self.on_message(msg)
            except Exception:
                pass

    def facts(self) -> StartupFacts:
        with self._lock_msgs:
            return parse_facts(list(self.messages))


class AttachedCollector:
    """Context manager: attach a VllmLogCollector to the ``vllm`` logger; optionally quiet vLLM's own console
    handlers (raised to ERROR: its start-up warnings are noise for a capture, and all of it still reaches the
    collector) so a progress display stays readable. Restores everything on exit."""

    def __init__(self, collector: VllmLogCollector, *, quiet_console: bool) -> None:
        self.collector = collector
        self.quiet_console = quiet_console
        self._saved: list[tuple[logging.Handler, int]] = []

    def __enter__(self) -> VllmLogCollector:
        logger = logging.getLogger("vllm")
        if self.quiet_console:
            for h in logger.handlers:
                if isinstance(h, logging.StreamHandler):
                    self._saved.append((h, h.level))
                    h.setLevel(max(h.level, logging.ERROR))
        logger.addHandler(self.collector)
        if logger.getEffectiveLevel() > logging.INFO:
            self._saved_level: int | None = logger.level
            logger.setLevel(logging.INFO)
        else:
            self._saved_level = None
        return self.collector

    def __exit__(self, *exc: object) -> None:
        logger = logging.getLogger("vllm")
        logger.removeHandler(self.collector)
        for h, level in self._saved:
            h.setLevel(level)
        if self._saved_level is not None:
            logger.setLevel(self._saved_level)
