"""Collective kernel name -> family (all_reduce, all_gather, send_recv, ...), from collective_families.toml."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path

FAMILIES_TOML = Path(__file__).with_name("collective_families.toml")
FALLBACK = "collective"


@dataclass(frozen=True)
class Family:
    name: str
    pattern: re.Pattern[str]
    why: str
    examples: tuple[str, ...]

    def match(self, kernel: str) -> bool:
        return self.pattern.search(kernel) is not None


@cache
def families() -> tuple[Family, ...]:
    raw = tomllib.loads(FAMILIES_TOML.read_text(encoding="utf-8"))
    return tuple(Family(f["name"], re.compile(f["pattern"]), f["why"], tuple(f["examples"]))
                 for f in raw["family"])


@lru_cache(maxsize=4096)
def collective_family(kernel: str) -> str:
    """First family whose pattern matches; ``collective`` when the name says nothing about the operation."""
    return next((f.name for f in families() if f.match(kernel)), FALLBACK)
