"""Imports point one way (docs/architecture.md): a module imports only from its own layer or the layers below
it, and no two modules import each other, directly or round a circle. Lazy imports inside functions count too:
they are the same dependency, paid later.

The layer order is data (``LAYERS``); a module sits in its folder's layer (``phaseprof/commands/`` holds every command,
the top layer), the top-level modules in ``base``, and ``MODULES`` places the few top-level modules that build on a
package. No module's layer depends on its file name: the folders are the layers, as a folder-level dependency tool
sees them.
"""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "phaseprof"

#: Bottom to top. A module may import its own layer and any layer before it in this list.
#: ``presets`` and ``memory`` (a model's shape: layers, heads, experts) build on ``base`` only and sit below the
#: analysis, whose layer plan (``analysis/layer_plan.py``) reads a model's shape to cut graph replays into layers.
#: ``pareto`` (frontier of serving sweeps) builds on memory and sol; capture writes its records into sweep.json.
#: ``disagg`` (a prefill/decode pair captured through two servers) builds on the server capture and the planner.
LAYERS = ("base", "render", "presets", "memory", "trace", "classify", "analysis", "sol", "report", "scale",
          "pareto", "capture", "disagg", "dashboard", "commands")
#: Modules placed by what they build on rather than by their folder: top-level modules above ``base``, and
#: ``trace.limits`` (the input bounds every reader applies, model configs included; it builds on ``errors`` only).
MODULES = {
    "phaseprof.__main__": "commands",  # ``python -m phaseprof``
    "phaseprof.trace.limits": "base",
    "phaseprof.inputs": "trace",  # what a path holds, judged with the trace loader's bounds (trace.limits)
    "phaseprof.columns": "classify",  # the declared tables' columns, buckets included (classify.buckets)
}


def layer_of(module: str) -> str:
    parts = module.split(".")
    if module in MODULES:
        return MODULES[module]
    if len(parts) > 1 and (PACKAGE / parts[1]).is_dir():
        return parts[1]
    return "base"


@lru_cache(maxsize=1)
def modules() -> dict[str, Path]:
    out = {}
    for f in sorted(PACKAGE.rglob("*.py")):
        name = ".".join(f.relative_to(REPO).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = f
    return out


def _target(name: str) -> str | None:
    """The phaseprof module ``name`` (a module, or a name inside one) comes from."""
    mods = modules()
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


@lru_cache(maxsize=1)
def imports() -> dict[str, set[str]]:
    """Module -> the phaseprof modules it imports (top level, in functions, under TYPE_CHECKING)."""
    graph: dict[str, set[str]] = {}
    for mod, f in modules().items():
        found = set()
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            found |= {t for n in names if n.startswith("phaseprof.") and (t := _target(n)) and t != mod}
        graph[mod] = found
    return graph


def upward_imports() -> list[str]:
    return sorted(f"{a} ({layer_of(a)}) imports {b} ({layer_of(b)})" for a, bs in imports().items() for b in bs
                  if LAYERS.index(layer_of(b)) > LAYERS.index(layer_of(a)))


def cycles() -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    graph, index, low, stack, on, out = imports(), {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_every_package_has_a_layer() -> None:
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert packages <= set(LAYERS), f"add {sorted(packages - set(LAYERS))} to LAYERS"
    assert all(m in modules() for m in MODULES)


def test_no_module_imports_a_layer_above_its_own() -> None:
    up = upward_imports()
    assert not up, "upward imports:\n  " + "\n  ".join(up)


def test_no_import_cycles() -> None:
    found = cycles()
    assert not found, "modules importing each other: " + "; ".join(" <-> ".join(c) for c in found)


def test_the_checks_catch_what_they_look_for() -> None:
    """The graph is read from the real files: known downward edges are in it, and both checks flag a planted
    upward edge and a planted circle."""
    graph = imports()
    assert "phaseprof.analysis.results" in graph["phaseprof.report.json_io"]
    assert "phaseprof.trace.tables" in graph["phaseprof.analysis.pipeline"]
    graph["phaseprof.trace.tables"].add("phaseprof.analysis.pipeline")  # upward, and a circle with it
    try:
        assert any(u.startswith("phaseprof.trace.tables (trace) imports phaseprof.analysis.pipeline")
                   for u in upward_imports())
        assert any("phaseprof.trace.tables" in c and "phaseprof.analysis.pipeline" in c for c in cycles())
    finally:
        graph["phaseprof.trace.tables"].discard("phaseprof.analysis.pipeline")


def test_capture_shared_imports_neither_capture_path() -> None:
    """``capture/shared/`` is what the in-process and the server path both use: it imports neither of them."""
    paths = ("phaseprof.capture.inprocess", "phaseprof.capture.server")
    wrong = sorted(f"{a} imports {b}" for a, bs in imports().items() if a.startswith("phaseprof.capture.shared")
                   for b in bs if b.startswith(paths))
    assert not wrong, "\n".join(wrong)
    assert any(b.startswith("phaseprof.capture.shared") for b in imports()["phaseprof.capture.server.capture"])
