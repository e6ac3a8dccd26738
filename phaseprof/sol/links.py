"""Interconnect bandwidths (``[[link]]`` entries of the GPU catalogue ``phaseprof/gpus.toml``): how fast a prefill engine's KV cache and
GDN state reach a decode engine (``pareto --disagg``). Read and checked with the GPU entries
(``gpu_names.read_catalogue``, the one reader of the file): a bad entry fails with one line naming the file and
the entry."""

from __future__ import annotations

from pathlib import Path

from phaseprof.errors import PhaseprofError
from phaseprof.gpu_names import CATALOGUE_PATH, Link, read_catalogue

__all__ = ["Link", "link_by_name", "load_links"]


def load_links(path: str | Path = CATALOGUE_PATH) -> tuple[Link, ...]:
    """The catalogue's links, in file order (``gpu_names.read_catalogue`` checks them)."""
    return read_catalogue(path).links


def link_by_name(name: str, *, path: str | Path = CATALOGUE_PATH) -> Link:
    links = load_links(path)
    for link in links:
        if link.name == name.lower():
            return link
    raise PhaseprofError(f"--link {name!r}: unknown link; known: {', '.join(x.name for x in links)}")
