"""The committed JSON Schemas, generated from the types that write each file.

``python -m phaseprof.commands.schemas`` rewrites every schema whose content differs from its types (files
already current are left byte for byte as they are); ``--check`` only lists them and exits 1 when any is stale
(the tests keep them current). The memory plan's schema (``memory/memory_plan.schema.json``) is written by hand:
its document is built from plain dicts, not from types.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from phaseprof.disagg.records import HANDOFF_SCHEMA_PATH, handoff_schema
from phaseprof.io import atomic_write_bytes
from phaseprof.pareto.records import PARETO_SCHEMA_PATH, pareto_schema
from phaseprof.records import RUN_SCHEMA_PATH, SWEEP_SCHEMA_PATH, RunRecord, SweepRecord, schema
from phaseprof.report import json_io
from phaseprof.scale import report as multirank

#: Committed schema file -> the function that derives it from the file's types.
SCHEMAS: dict[Path, Callable[[], dict[str, Any]]] = {
    json_io.SCHEMA_PATH: json_io.json_schema,  # breakdown.json
    RUN_SCHEMA_PATH: lambda: schema(RunRecord),  # run.json
    SWEEP_SCHEMA_PATH: lambda: schema(SweepRecord),  # sweep.json
    multirank.SCHEMA_PATH: multirank.json_schema,  # multirank.json
    PARETO_SCHEMA_PATH: pareto_schema,  # pareto --format json
    HANDOFF_SCHEMA_PATH: handoff_schema,  # handoff.json of a disaggregated (PD) capture
}


def stale() -> dict[Path, dict[str, Any]]:
    """Committed schemas whose content (parsed, key order aside) is not their types' schema, with the new one."""
    out = {}
    for path, derive in SCHEMAS.items():
        doc = json.loads(json.dumps(derive()))  # as JSON reads it back: tuples as lists
        if not path.is_file() or json.loads(path.read_text()) != doc:
            out[path] = doc
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args not in ([], ["--check"]):
        print("usage: python -m phaseprof.commands.schemas [--check]", file=sys.stderr)
        return 2
    todo = stale()
    for path, doc in todo.items():
        if args != ["--check"]:
            atomic_write_bytes(path, (json.dumps(doc, indent=2) + "\n").encode())
        print(f"{'stale' if args else 'wrote'}: {path}")
    return 1 if todo and args else 0


if __name__ == "__main__":
    sys.exit(main())
