"""vLLM's startup facts from its log lines: the one parser capture (while the engine starts) and the memory plan
(from a ``vllm_startup.log`` beside a run) share, with one set of names. Capture stores the parsed facts
(``StartupFacts``, typed in ``records.RunRecord`` / ``SweepRecord``); readers take them as stored.

vLLM logs (messages as of 0.23-0.28; matched by pattern, so wording drift only loses a fact, never fails a run):
  ``Setting attention block size to 1056 tokens to ensure that attention page size is >= mamba page size.``
  ``Padding mamba page size by 0.76% to ensure that mamba page size and attention page size are exactly equal.``
  ``GPU KV cache size: 1,234,567 tokens``  ``Maximum concurrency for 8,192 tokens per request: 150.70x``
  (0.28 prints both on one line; CPU builds print "GPU KV cache size" too)
  ``Available KV cache memory: 12.3 GiB`` (GPU, measured by memory profiling)
  ``Explicitly set (1.0/9.34) GiB for KV cache on node 0.`` (CPU) and ``... reserved 4.0 GiB memory for KV Cache
  as specified by kv_cache_memory_bytes ...`` (GPU): a reservation, not a measurement
  ``Model loading took 64.61 GiB memory``  ``Estimated CUDA graph memory: 0.95 GiB``
  ``CUDA graph pool memory: 1.02 GiB (actual)``  ``Tried to allocate 2.00 GiB`` (an OOM)
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

_NUM = r"([0-9][0-9,]*(?:\.[0-9]+)?)"

#: fact -> pattern; group 1 is the value (``max_concurrency``: group 1 the tokens per request, group 2 the value).
PATTERNS: dict[str, re.Pattern[str]] = {
    "attention_block_size_tokens": re.compile(r"Setting attention block size to (\d+) tokens"),
    "mamba_page_padding_pct": re.compile(r"Padding mamba page size by " + _NUM + "%"),
    "kv_cache_tokens": re.compile(r"KV cache size: " + _NUM + " tokens"),
    "max_concurrency": re.compile(r"Maximum concurrency for " + _NUM + " tokens per request: " + _NUM + "x"),
    "available_kv_cache_gib": re.compile(r"Available KV cache memory: " + _NUM + " GiB"),
    "reserved_kv_cache_gib": re.compile(r"Explicitly set \(" + _NUM + r"/" + _NUM + r"\) GiB for KV cache"
                                        r"|reserved " + _NUM + r" GiB memory for KV Cache"),
    "model_loading_gib": re.compile(r"Model loading took " + _NUM + " GiB"),
    "cudagraph_estimate_gib": re.compile(r"Estimated CUDA graph memory: " + _NUM + " GiB"),
    "cudagraph_actual_gib": re.compile(r"CUDA graph pool memory: " + _NUM + r" GiB \(actual\)"),
    "oom_tried_gib": re.compile(r"Tried to allocate " + _NUM + " GiB"),
}
_INTS = frozenset({"attention_block_size_tokens", "kv_cache_tokens", "max_concurrency_tokens"})


def _num(text: str) -> float:
    return float(text.replace(",", ""))


@dataclass(frozen=True)
class StartupFacts:
    """What vLLM decided at startup, None when it did not log it. Units in names.

    - ``attention_block_size_tokens``: KV block size; on hybrid models raised so one attention page holds a
      mamba state. ``mamba_page_padding_pct``: how much each mamba state page is padded to match it.
    - ``kv_cache_tokens``: tokens of context the KV pool holds; ``max_concurrency``: requests of
      ``max_concurrency_tokens`` tokens that fit in it at once.
    - ``available_kv_cache_gib``: KV memory measured by vLLM's memory profiling (GPU);
      ``reserved_kv_cache_gib``: KV memory set explicitly (CPU, or ``kv_cache_memory_bytes``); ``kv_cache_gib``
      is whichever was logged.
    - ``model_loading_gib``: weights as loaded; ``cudagraph_estimate_gib`` / ``cudagraph_actual_gib``: CUDA-graph
      pool, estimated before capture / measured after; ``oom_tried_gib``: the allocation that failed.
    - ``raw_lines``: every matching log line, verbatim.
    """

    attention_block_size_tokens: int | None = None
    mamba_page_padding_pct: float | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    max_concurrency_tokens: int | None = None
    available_kv_cache_gib: float | None = None
    reserved_kv_cache_gib: float | None = None
    model_loading_gib: float | None = None
    cudagraph_estimate_gib: float | None = None
    cudagraph_actual_gib: float | None = None
    oom_tried_gib: float | None = None
    raw_lines: tuple[str, ...] = ()

    @property
    def kv_cache_gib(self) -> float | None:
        """Memory the KV cache got: measured if vLLM measured it, else the explicit reservation."""
        return self.available_kv_cache_gib if self.available_kv_cache_gib is not None else self.reserved_kv_cache_gib

    @property
    def is_empty(self) -> bool:
        return all(getattr(self, f) is None for f in FACT_NAMES)

    def to_dict(self) -> dict[str, Any]:
        """The facts as run.json and sweep.json keep them."""
        return {**{f: getattr(self, f) for f in FACT_NAMES}, "raw_lines": list(self.raw_lines)}


FACT_NAMES: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(StartupFacts) if f.name != "raw_lines")


def parse_values(lines: Iterable[str]) -> tuple[dict[str, int | float], list[str]]:
    """(first value of every fact found, the lines that matched). vLLM logs each fact once; with several
    engines in one log, the first is kept."""
    found: dict[str, int | float] = {}
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
            else:
                value = _num(next(g for g in m.groups() if g is not None))
                found.setdefault(key, int(value) if key in _INTS else value)
        if hit:
            raw.append(line)
    return found, raw


def parse_facts(lines: Iterable[str]) -> StartupFacts:
    """StartupFacts from log messages (first match of each fact wins; all matching lines are kept)."""
    found, raw = parse_values(lines)
    return StartupFacts(raw_lines=tuple(raw), **found)  # type: ignore[arg-type]


def stored_layout(doc: dict[str, Any]) -> dict[str, Any]:
    """Stored facts (run.json's or sweep.json's ``vllm_startup_facts``) in the current layout, for the record
    reader to type. Files written before the measured and the reserved KV size were told apart hold one
    ``kv_cache_gib``: it is filed under the name its own stored line says (``reserved_kv_cache_gib`` when the
    line is vLLM's explicit reservation, else ``available_kv_cache_gib``); nothing else is re-read from the
    lines."""
    d = dict(doc)
    legacy = d.pop("kv_cache_gib", None)
    if legacy is not None and d.get("available_kv_cache_gib") is None and d.get("reserved_kv_cache_gib") is None:
        lines = [str(x) for x in d.get("raw_lines") or []]
        reserved = any(PATTERNS["reserved_kv_cache_gib"].search(ln) for ln in lines)
        d["reserved_kv_cache_gib" if reserved else "available_kv_cache_gib"] = legacy
    return d
