"""Every top-level function of ``phaseprof/`` has a caller in the program: ``phaseprof/``,
``scripts/``, ``benchmarks/`` or ``dashboards/``. A function only tests call belongs in the tests; one nobody calls
goes. Decorated functions (typer commands and callbacks: the decorator is their caller) and dunders (PEP 562's
module ``__getattr__``) are not asked.

A reference is read from the syntax tree, by module: a use of the name in its own module (outside its own body),
``from <its module or package> import name`` elsewhere, ``<alias of its module>.name``, or ``module:name`` in
``pyproject.toml`` or a TOML file under ``phaseprof/`` (entry points). Docstrings and comments do not count.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROGRAM = ("phaseprof", "scripts", "benchmarks", "dashboards")
#: (module, function) -> why it has no caller the scan can see. Keep it empty unless unavoidable.
ALLOWED: dict[tuple[str, str], str] = {
}


@dataclass(frozen=True)
class Source:
    module: str  # dotted name; a script's path with dots
    path: Path
    tree: ast.Module


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")


@lru_cache(maxsize=1)
def program() -> tuple[Source, ...]:
    files = sorted(f for d in PROGRAM for f in (REPO / d).rglob("*.py") if "__pycache__" not in f.parts)
    return tuple(Source(_module_name(f), f, ast.parse(f.read_text(), str(f))) for f in files)


def defined() -> list[tuple[Source, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Top-level functions of phaseprof/ a caller must be found for."""
    return [(src, node) for src in program() if src.module.startswith("phaseprof")
            for node in src.tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and not node.decorator_list and not (node.name.startswith("__") and node.name.endswith("__"))]


def _absolute(src: Source, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = src.module.split(".")
    if src.path.name != "__init__.py":
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _module_aliases(src: Source) -> dict[str, set[str]]:
    """Local name -> the modules it stands for (``import a.b as n``, ``from a import b``, and a loop's name over
    such names: ``for mod in (analyze_cli, sol_cli): mod.register(app)``)."""
    out: dict[str, set[str]] = {}
    for node in ast.walk(src.tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                out.setdefault(a.asname or a.name.partition(".")[0], set()).add(
                    a.name if a.asname else a.name.partition(".")[0])
        elif isinstance(node, ast.ImportFrom):
            mod = _absolute(src, node)
            for a in node.names:
                out.setdefault(a.asname or a.name, set()).add(f"{mod}.{a.name}")
    for node in ast.walk(src.tree):
        if (isinstance(node, ast.For) and isinstance(node.target, ast.Name)
                and isinstance(node.iter, (ast.Tuple, ast.List))):
            for elt in node.iter.elts:
                if isinstance(elt, ast.Name):
                    out.setdefault(node.target.id, set()).update(out.get(elt.id, ()))
    return out


def _dotted(node: ast.expr, aliases: dict[str, set[str]]) -> set[str]:
    if isinstance(node, ast.Name):
        return aliases.get(node.id, set())
    if isinstance(node, ast.Attribute):
        return {f"{head}.{node.attr}" for head in _dotted(node.value, aliases)}
    return set()


def _imported_by_name(src: Source) -> set[tuple[str, str]]:
    """``importlib.import_module(name).attr`` with ``name`` among the file's string constants naming a phaseprof
    module (``COMMAND_MODULES = {"memory": "phaseprof.commands.memory"}``, then ``import_module(name).register(app)``)."""
    names = {n.value for n in ast.walk(src.tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
             and n.value.startswith("phaseprof.")}
    attrs = {n.attr for n in ast.walk(src.tree) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Call)
             and getattr(n.value.func, "attr", getattr(n.value.func, "id", None)) == "import_module"}
    return {(m, a) for m in names for a in attrs}


@lru_cache(maxsize=1)
def references() -> frozenset[tuple[str, str]]:
    """(module, name) pairs the program refers to from another module."""
    out: set[tuple[str, str]] = set()
    for src in program():
        out |= _imported_by_name(src)
        aliases = _module_aliases(src)
        for node in ast.walk(src.tree):
            if isinstance(node, ast.ImportFrom) and src.path.name != "__init__.py":  # a re-export is no use
                mod = _absolute(src, node)
                out |= {(mod, a.name) for a in node.names}
            elif isinstance(node, ast.Attribute):
                out |= {(head, node.attr) for head in _dotted(node.value, aliases)}
    return frozenset(out)


def _used_in_own_module(src: Source, fn: ast.AST, name: str) -> bool:
    for node in src.tree.body:
        if node is fn:
            continue
        for sub in ast.walk(node):
            if (isinstance(sub, ast.Name) and sub.id == name) or (isinstance(sub, ast.Attribute)
                                                                   and sub.attr == name):
                return True
    return False


@lru_cache(maxsize=1)
def _toml_text() -> str:
    return "\n".join(p.read_text() for p in [REPO / "pyproject.toml", *sorted((REPO / "phaseprof").rglob("*.toml"))])


def has_program_caller(src: Source, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    name, mod = fn.name, src.module
    packages = {mod.rsplit(".", i)[0] for i in range(mod.count("."))}  # from a package that re-exports it
    return (_used_in_own_module(src, fn, name) or any((m, name) in references() for m in {mod} | packages)
            or f"{mod}:{name}" in _toml_text())


def test_the_scan_sees_callers() -> None:
    """The scan finds real callers: by import, through a module alias, and inside the module itself."""
    found = {(src.module, fn.name): has_program_caller(src, fn) for src, fn in defined()}
    assert found[("phaseprof.report.json_io", "load_breakdown")]  # from ... import load_breakdown
    assert found[("phaseprof.commands.schemas", "main")]  # its module's ``if __name__ == "__main__"``
    assert found[("phaseprof.commands.ceilings", "register")]  # through a loop's name or ``import_module(name)``
    assert len(found) > 300


def test_no_function_only_tests_call() -> None:
    lonely = [f"{src.path.relative_to(REPO)}:{fn.lineno} {fn.name}" for src, fn in defined()
              if (src.module, fn.name) not in ALLOWED and not has_program_caller(src, fn)]
    assert not lonely, ("functions of phaseprof/ with no caller outside tests/ (move them into the tests, or "
                        f"make the program use them): {lonely}")


def test_allowed_entries_still_exist() -> None:
    names = {(src.module, fn.name) for src, fn in defined()}
    assert not set(ALLOWED) - names
