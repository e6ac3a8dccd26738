"""Breakdown <-> versioned JSON. The JSON Schema is generated from the dataclasses (msgspec) and committed."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import msgspec
import orjson

from phaseprof.analysis.results import Breakdown
from phaseprof.defaults import SCHEMA_VERSION
from phaseprof.errors import PhaseprofError
from phaseprof.io import atomic_write_bytes
from phaseprof.records import RunRecord
from phaseprof.trace.limits import require_regular_file

SCHEMA_PATH = Path(__file__).with_name("breakdown.schema.json")
_MAJOR, _MINOR = (int(x) for x in SCHEMA_VERSION.split("."))
_MAX_BREAKDOWN_BYTES = 256 << 20  # a breakdown is ~100 KB; far bigger is not one (and would be read whole)


def dumps(bd: Breakdown) -> bytes:
    """The JSON document; ``capture`` as the flat subset a capture embeds in its trace (``RunRecord.embedded``),
    {} when the breakdown has none. orjson writes the dataclasses itself, fields in order (what
    ``dataclasses.asdict`` gives, without its deep copy of every value: it took as long as the analysis on a
    trace of 20k steps)."""
    doc = {f.name: getattr(bd, f.name) for f in dataclasses.fields(bd)}
    doc["capture"] = {} if bd.capture is None else bd.capture.embedded()
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY)


def write_breakdown(bd: Breakdown, path: str | Path) -> Path:
    """Write the breakdown JSON atomically (temp file, then rename); one-line error when it cannot be written."""
    p = Path(path)
    if p.is_dir():
        raise PhaseprofError("is a directory: cannot write the breakdown JSON onto it", path=p)
    try:
        return atomic_write_bytes(p, dumps(bd) + b"\n")
    except OSError as e:
        raise PhaseprofError(f"cannot write the breakdown JSON: {e.strerror or e}", path=p) from None


def load_breakdown(path: str | Path) -> Breakdown:
    """Read a breakdown JSON written by phaseprof; rejects other schema major versions with a clear error."""
    p = require_regular_file(path, what="breakdown JSON")  # a FIFO would block the read
    if p.stat().st_size > _MAX_BREAKDOWN_BYTES:
        raise PhaseprofError(f"over {_MAX_BREAKDOWN_BYTES >> 20} MB: not a phaseprof breakdown", path=p)
    try:
        raw = orjson.loads(p.read_bytes())
    except OSError as e:
        raise PhaseprofError(f"cannot read: {e.strerror}", path=p) from None
    except orjson.JSONDecodeError as e:
        raise PhaseprofError(f"not valid JSON ({e})", path=p) from None
    return breakdown_from_doc(raw, path=p)


def breakdown_from_doc(raw: object, *, path: str | Path) -> Breakdown:
    """A breakdown JSON document (already parsed) as a Breakdown; ``path`` names it in errors. Its ``capture`` is
    the embedded subset a capture writes (``RunRecord.from_embedded``), the rest is the typed result."""
    p = path
    if not isinstance(raw, dict) or "schema_version" not in raw:
        raise PhaseprofError("not a phaseprof breakdown (no schema_version)", path=p)
    if not _readable_schema(raw["schema_version"]):
        raise PhaseprofError(f"breakdown schema {str(raw['schema_version'])[:20]!r} is not supported "
                             f"(this phaseprof reads {SCHEMA_VERSION} and older {_MAJOR}.x)", path=p)
    raw = dict(raw)
    capture = raw.pop("capture", None)
    if capture is not None and not isinstance(capture, dict):
        raise PhaseprofError(f"malformed breakdown (capture is a JSON {type(capture).__name__}, expected an object)",
                             path=p)
    try:
        bd = msgspec.convert(raw, Breakdown, strict=False)
    except msgspec.ValidationError as e:
        raise PhaseprofError(f"malformed breakdown ({e})", path=p) from None
    return replace(bd, capture=RunRecord.from_embedded(capture, source=f"{p}: capture") if capture else None)


def _readable_schema(version: object) -> bool:
    """Same major version and a minor this phaseprof knows (1.9 is a newer writer's: its fields may mean more)."""
    m = re.fullmatch(r"([0-9]{1,4})\.([0-9]{1,4})", version) if isinstance(version, str) else None
    return m is not None and int(m[1]) == _MAJOR and int(m[2]) <= _MINOR


def json_schema() -> dict[str, Any]:
    """JSON Schema (2020-12) of the breakdown document, generated from the result dataclasses."""
    schema = msgspec.json.schema(Breakdown)
    # ``capture`` is written as the embedded subset (an object of capture facts), not as a whole RunRecord.
    schema["$defs"]["Breakdown"]["properties"]["capture"] = {"type": "object", "default": {}}
    reachable = _reachable(schema["$defs"], "Breakdown")
    schema["$defs"] = {k: v for k, v in schema["$defs"].items() if k in reachable}
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = f"phaseprof breakdown, schema_version {SCHEMA_VERSION}"
    return schema


def _reachable(defs: dict[str, Any], root: str) -> set[str]:
    """The ``$defs`` entries ``root`` refers to, directly or not."""
    seen, todo = set(), [root]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += re.findall(r'"#/\$defs/([^"]+)"', orjson.dumps(defs[name]).decode())
    return seen
