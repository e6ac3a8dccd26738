"""Breakdown <-> versioned JSON. The JSON Schema is generated from the dataclasses (msgspec) and committed."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import msgspec
import orjson

from phaseprof.analysis.results import Breakdown
from phaseprof.defaults import SCHEMA_VERSION
from phaseprof.errors import PhaseprofError
from phaseprof.io import atomic_write_bytes

SCHEMA_PATH = Path(__file__).with_name("breakdown.schema.json")


def breakdown_to_dict(bd: Breakdown) -> dict[str, Any]:
    return dataclasses.asdict(bd)


def dumps(bd: Breakdown) -> bytes:
    return orjson.dumps(breakdown_to_dict(bd), option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY)


def write_breakdown(bd: Breakdown, path: str | Path) -> Path:
    """Write the breakdown JSON atomically (temp file, then rename)."""
    return atomic_write_bytes(path, dumps(bd) + b"\n")


def load_breakdown(path: str | Path) -> Breakdown:
    """Read a breakdown JSON written by phaseprof; rejects other schema major versions with a clear error."""
    p = Path(path)
    try:
        raw = orjson.loads(p.read_bytes())
    except FileNotFoundError:
        raise PhaseprofError("no such file", path=p) from None
    except orjson.JSONDecodeError as e:
        raise PhaseprofError(f"not valid JSON ({e})", path=p) from None
    if not isinstance(raw, dict) or "schema_version" not in raw:
        raise PhaseprofError("not a phaseprof breakdown (no schema_version)", path=p)
    if str(raw["schema_version"]).split(".")[0] != SCHEMA_VERSION.split(".")[0]:
        raise PhaseprofError(f"breakdown schema {raw['schema_version']} is not supported "
                             f"(this phaseprof reads {SCHEMA_VERSION})", path=p)
    try:
        return msgspec.convert(raw, Breakdown, strict=False)
    except msgspec.ValidationError as e:
        raise PhaseprofError(f"malformed breakdown ({e})", path=p) from None


def json_schema() -> dict[str, Any]:
    """JSON Schema (2020-12) of the breakdown document, generated from the result dataclasses."""
    schema = msgspec.json.schema(Breakdown)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = f"phaseprof breakdown, schema_version {SCHEMA_VERSION}"
    return schema
