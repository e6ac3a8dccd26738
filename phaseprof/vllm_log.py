"""vLLM's startup facts from its log lines: the one parser capture (while the engine starts) and the memory plan
(from a run directory) share, with one set of names.

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
from collections.abc import Iterable, Mapping
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
#: Spellings of earlier files (memory plan JSON before the names were unified) -> the names here.
ALIASES = {"attention_block_size": "attention_block_size_tokens"}


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
        """The facts as run.json keeps them (``kv_cache_gib`` included, for readers of older files)."""
        d = {f: getattr(self, f) for f in FACT_NAMES}
        return {**d, "kv_cache_gib": self.kv_cache_gib, "raw_lines": list(self.raw_lines)}


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


def _coerce(name: str, value: Any) -> int | float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        num = _num(str(value))
    except ValueError:
        return None
    return int(num) if name in _INTS else num


def facts_from_dict(doc: Mapping[str, Any], extra_lines: Iterable[str] = ()) -> StartupFacts:
    """Facts stored in a file (run.json's ``vllm_startup_facts``, a memory plan's ``vllm_facts``), plus any
    further log lines: the lines are parsed again (so each GiB figure lands under the right name whatever the
    file called it), then the stored values win where they are set."""
    lines = [str(x) for x in doc.get("raw_lines") or []] + list(extra_lines)
    values: dict[str, Any] = parse_values(lines)[0]
    for key, v in doc.items():
        name = ALIASES.get(key, key)
        if name in FACT_NAMES and (c := _coerce(name, v)) is not None:
            values[name] = c
    legacy = _coerce("kv_cache_gib", doc.get("kv_cache_gib"))
    said = values.get("available_kv_cache_gib") is not None or values.get("reserved_kv_cache_gib") is not None
    if legacy is not None and not said:
        values["available_kv_cache_gib"] = legacy  # an older file without the lines that say which it was
    matched = tuple(ln.strip() for ln in lines if any(p.search(ln) for p in PATTERNS.values()))
    return StartupFacts(raw_lines=matched, **values)
