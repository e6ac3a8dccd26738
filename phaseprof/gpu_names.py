"""One GPU catalogue and one way to compare GPU names.

``gpus.toml`` (beside this module) is the catalogue: one entry per GPU, its memory facts (the memory planner,
``memory.gpus``) and its datasheet throughput (the speed of light, ``sol.ceilings``), each with its source.
``gpu_key``: the datasheet's ``H100-SXM5-80GB``, a user's ``h100 sxm5 80gb`` and a measured-ceilings file's
``NVIDIA H200`` against a trace's ``NVIDIA H200`` are equal when their keys are."""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from phaseprof.errors import PhaseprofError

CATALOGUE_PATH = Path(__file__).with_name("gpus.toml")


def gpu_key(name: str) -> str:
    """``name`` without spaces, dashes and underscores, upper-cased: the key GPU names are compared by."""
    return re.sub(r"[\s_\-]+", "", name).upper()


def read_catalogue(file: Path = CATALOGUE_PATH) -> dict[str, Any]:
    """A catalogue's TOML document ([[gpu]] and [[link]] tables); a missing file or bad TOML → PhaseprofError
    naming the file."""
    try:
        return tomllib.loads(file.read_text())
    except OSError:
        raise PhaseprofError("GPU catalogue not found", path=file) from None
    except tomllib.TOMLDecodeError as e:
        raise PhaseprofError(f"not valid TOML: {e}", path=file) from None


@lru_cache(maxsize=1)
def catalogue_gpus() -> tuple[dict[str, Any], ...]:
    """The [[gpu]] entries of the package's catalogue, in file order, as TOML gives them (each reader checks the
    keys it reads)."""
    gpus = read_catalogue().get("gpu", [])
    if not isinstance(gpus, list) or not all(isinstance(g, dict) for g in gpus):
        raise PhaseprofError("[[gpu]] must be a list of tables", path=CATALOGUE_PATH)
    return tuple(gpus)
