"""vLLM's own startup facts, read from its log lines while the engine starts.

vLLM logs (messages as of 0.23-0.28; matched by pattern, so wording drift only loses a fact, never fails a run):
  ``Setting attention block size to 1056 tokens to ensure that attention page size is >= mamba page size.``
  ``Padding mamba page size by 0.76% to ensure that mamba page size and attention page size are exactly equal.``
  ``GPU KV cache size: 1,234,567 tokens``       ``Maximum concurrency for 8,192 tokens per request: 150.70x``
  ``Available KV cache memory: 12.3 GiB`` (GPU)  ``Explicitly set (1.0/9.34) GiB for KV cache on node 0.`` (CPU)
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

_NUM = r"([0-9][0-9,]*(?:\.[0-9]+)?)"

PATTERNS: dict[str, re.Pattern[str]] = {
    "attention_block_size_tokens": re.compile(r"Setting attention block size to (\d+) tokens"),
    "mamba_page_padding_pct": re.compile(r"Padding mamba page size by " + _NUM + r"%"),
    "kv_cache_tokens": re.compile(r"KV cache size: " + _NUM + r" tokens"),
    "max_concurrency": re.compile(r"Maximum concurrency for " + _NUM + r" tokens per request: " + _NUM + r"x"),
    "available_kv_cache_gib": re.compile(r"Available KV cache memory: " + _NUM + r" GiB"),
    "explicit_kv_cache_gib": re.compile(r"Explicitly set \(" + _NUM + r"/" + _NUM + r"\) GiB for KV cache"),
    "kv_cache_memory_bytes_gib": re.compile(r"reserved " + _NUM + r" GiB memory for KV Cache"),
}


def _num(text: str) -> float:
    return float(text.replace(",", ""))


@dataclass(frozen=True)
class StartupFacts:
    """What vLLM decided at startup (None when it did not log it).

    - ``attention_block_size_tokens``: KV block size; on hybrid models raised so one attention page holds a mamba state.
    - ``mamba_page_padding_pct``: how much each mamba state page is padded to equal the attention page.
    - ``kv_cache_tokens``: tokens of context the KV pool holds (max_concurrency x max_model_len).
    - ``max_concurrency``: requests of ``max_concurrency_tokens`` tokens that fit in the KV pool at once.
    - ``kv_cache_gib``: memory given to the KV cache (GPU: profiled free memory; CPU or an explicit
      ``kv_cache_memory_bytes``: the reserved amount).
    - ``raw_lines``: every matching log line, verbatim.
    """

    attention_block_size_tokens: int | None = None
    mamba_page_padding_pct: float | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    max_concurrency_tokens: int | None = None
    kv_cache_gib: float | None = None
    raw_lines: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, object]:
        return {
            "attention_block_size_tokens": self.attention_block_size_tokens,
            "mamba_page_padding_pct": self.mamba_page_padding_pct,
            "kv_cache_tokens": self.kv_cache_tokens,
            "max_concurrency": self.max_concurrency,
            "max_concurrency_tokens": self.max_concurrency_tokens,
            "kv_cache_gib": self.kv_cache_gib,
            "raw_lines": list(self.raw_lines),
        }


def parse_facts(lines: Iterable[str]) -> StartupFacts:
    """Extract StartupFacts from log messages (first match of each fact wins; all matching lines are kept)."""
    found: dict[str, object] = {}
    raw: list[str] = []
    for line in lines:
        hit = False
        for key, pat in PATTERNS.items():
            m = pat.search(line)
            if not m:
                continue
            hit = True
            if key == "max_concurrency":
                found.setdefault("max_concurrency_tokens", int(_num(m.group(1))))
                found.setdefault("max_concurrency", _num(m.group(2)))
            elif key in ("available_kv_cache_gib", "explicit_kv_cache_gib", "kv_cache_memory_bytes_gib"):
                found.setdefault("kv_cache_gib", _num(m.group(1)))
            elif key in ("attention_block_size_tokens", "kv_cache_tokens"):
                found.setdefault(key, int(_num(m.group(1))))
            else:
                found.setdefault(key, _num(m.group(1)))
        if hit:
            raw.append(line)
    return StartupFacts(raw_lines=tuple(raw), **found)  # type: ignore[arg-type]


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
