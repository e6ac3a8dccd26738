"""Collective kernel name -> family (all_reduce, all_gather, ep_dispatch, ...) and its expert-parallel role,
from collective_families.toml."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path

FAMILIES_TOML = Path(__file__).with_name("collective_families.toml")
FALLBACK = "collective"
EP_ROLES = ("dispatch", "combine")
NEXT = "next"  # takes the role of the rank's next dispatch/combine kernel
WHENS = ("before_moe", "after_moe")


@dataclass(frozen=True)
class Family:
    name: str
    role: str  # "dispatch" / "combine" (the name says so), "next", or a generic collective ("allreduce", ...)
    pattern: re.Pattern[str]
    why: str
    examples: tuple[str, ...]

    def match(self, kernel: str) -> bool:
        return self.pattern.search(kernel) is not None


@dataclass(frozen=True)
class ContextRule:
    """A generic collective that is an EP dispatch or combine by its place around the MoE compute."""

    family: str
    when: str  # "before_moe" | "after_moe"
    role: str  # "dispatch" | "combine"
    why: str


def _raw() -> dict:
    return tomllib.loads(FAMILIES_TOML.read_text(encoding="utf-8"))


@cache
def families() -> tuple[Family, ...]:
    return tuple(Family(f["name"], f["role"], re.compile(f["pattern"]), f["why"], tuple(f["examples"]))
                 for f in _raw()["family"])


@cache
def context_rules() -> tuple[ContextRule, ...]:
    rules = tuple(ContextRule(c["family"], c["when"], c["role"], c["why"]) for c in _raw().get("context", []))
    known = {f.name for f in families()}
    for r in rules:  # a typo here would silently never match
        if r.family not in known or r.when not in WHENS or r.role not in EP_ROLES:
            raise ValueError(f"{FAMILIES_TOML}: bad [[context]] rule {r}")
    return rules


@lru_cache(maxsize=4096)
def collective_family(kernel: str) -> str:
    """First family whose pattern matches; ``collective`` when the name says nothing about the operation."""
    return next((f.name for f in families() if f.match(kernel)), FALLBACK)


@lru_cache(maxsize=256)
def family_role(family: str) -> str:
    """The family's role from the TOML (``collective`` for the fallback family). Cached as ``collective_family``
    is: it is asked once per collective and rank (~42k times for 16 ranks of 2,600 collectives)."""
    return next((f.role for f in families() if f.name == family), FALLBACK)


def row_roles(family: list[str], before_us: list[float], after_us: list[float]
              ) -> tuple[list[str | None], list[str | None]]:
    """Per collective of one rank, in start order (``family``: its family; ``before_us`` / ``after_us``: MoE
    kernel time just before / after it): its EP role from its family (dispatch / combine, or the role of the
    following dispatch/combine kernel for a family that takes it) or None; and per collective left without one,
    the role the context rules give it, else None. Kept on the rank as ``RankCollectives.ep_roles``."""
    named = [family_role(f) for f in family]
    roles: list[str | None] = [r if r in EP_ROLES else None for r in named]
    nxt = None
    for i in range(len(family) - 1, -1, -1):  # "next": the role of the following dispatch/combine kernel
        if named[i] in EP_ROLES:
            nxt = named[i]
        elif named[i] == NEXT:
            roles[i] = nxt
    context: list[str | None] = [None] * len(family)
    for i, f in enumerate(family):
        if roles[i] is not None:
            continue
        for rule in context_rules():
            around = before_us[i] if rule.when == "after_moe" else after_us[i]
            if rule.family == f and around > 0:
                context[i] = rule.role
                break
    return roles, context
