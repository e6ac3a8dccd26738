"""Interconnect bandwidths (``[[link]]`` entries of the GPU catalogue ``phaseprof/gpus.toml``): how fast a prefill engine's KV cache and
GDN state reach a decode engine (``pareto --disagg``). Validated like the GPU entries: a bad entry fails with
one line naming the file and the entry."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from phaseprof.classify.rules import check_keys
from phaseprof.errors import PhaseprofError
from phaseprof.gpu_names import read_catalogue
from phaseprof.sol.ceilings import SPEC_PATH

_KEYS = frozenset({"name", "gb_per_s", "source"})


@dataclass(frozen=True)
class Link:
    """One direction of a GPU-to-GPU link: ``gb_per_s`` GB/s (1e9 bytes/s) and where the figure comes from."""

    name: str
    gb_per_s: float
    source: str


def load_links(path: str | Path = SPEC_PATH) -> tuple[Link, ...]:
    file = Path(path)
    data = read_catalogue(file)
    out = []
    for i, t in enumerate(data.get("link", []), 1):
        def fail(problem: str, _i: int = i) -> PhaseprofError:
            return PhaseprofError(f"[[link]] #{_i}: {problem}", path=file)

        check_keys(t, required=_KEYS, allowed=_KEYS, fail=fail)
        bw = t["gb_per_s"]
        if isinstance(bw, bool) or not isinstance(bw, (int, float)) or not math.isfinite(bw) or bw <= 0:
            raise fail(f"gb_per_s must be a positive number, not {bw!r}")
        if not all(isinstance(t[k], str) and t[k].strip() for k in ("name", "source")):
            raise fail("name and source must be non-empty strings")
        out.append(Link(t["name"], float(bw), t["source"]))
    return tuple(out)


def link_by_name(name: str, *, path: str | Path = SPEC_PATH) -> Link:
    links = load_links(path)
    for link in links:
        if link.name == name.lower():
            return link
    raise PhaseprofError(f"--link {name!r}: unknown link; known: {', '.join(x.name for x in links)}")
