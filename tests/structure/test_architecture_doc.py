"""docs/architecture.md stays a map of the code: it names every package folder under ``phaseprof/`` (and every
layer the import-direction test knows), and the conventions it states hold in the code (checked on its AST)."""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

from tests.structure.test_import_direction import LAYERS

REPO = Path(__file__).resolve().parents[2]
DOC = (REPO / "docs" / "architecture.md").read_text()


def package_folders() -> list[str]:
    """Every folder below phaseprof/ holding Python or data files (``analysis``, ``classify/rules``, ...)."""
    root = REPO / "phaseprof"
    return sorted(str(d.relative_to(root)) for d in root.rglob("*") if d.is_dir() and d.name != "__pycache__"
                  and any(f.is_file() and f.suffix in (".py", ".toml", ".json") for f in d.iterdir()))


def test_every_package_folder_is_named() -> None:
    folders = package_folders()
    assert "analysis" in folders and "classify/rules" in folders  # the walk finds real folders
    missing = [f for f in folders if f"{f}/" not in DOC]
    assert not missing, f"docs/architecture.md does not name {missing}"


def test_every_layer_is_named() -> None:
    missing = [layer for layer in LAYERS if layer not in ("base",) and f"`{layer}/`" not in DOC]
    assert not missing, f"docs/architecture.md's layer list lacks {missing}"


# --------------------------------------------------------------------------------------------------------------
# The conventions the page states, checked against the code: each record has one reader (no dict walked for key
# names), run.json is located in one place, one classifier says what a path is, one module reads the GPU catalogue.

PACKAGE = REPO / "phaseprof"
PROSE = " ".join(DOC.split())  # the page's text with its line breaks as spaces


def _modules() -> dict[str, ast.Module]:
    """Every module under phaseprof/, parsed, by its path relative to the repository."""
    return {str(p.relative_to(REPO)): ast.parse(p.read_text(), filename=str(p)) for p in sorted(PACKAGE.rglob("*.py"))}


MODULES = _modules()


def _constants(tree: ast.AST) -> list[object]:
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)]


def _where(pred: Callable[[object], bool]) -> set[str]:
    """The modules holding a constant (string or bytes, docstrings included) for which ``pred`` holds."""
    return {name for name, tree in MODULES.items() if any(pred(c) for c in _constants(tree))}


def _key_walkers(tree: ast.AST) -> list[str]:
    """Functions that search a dict for key names: a walker taking keys as ``*args`` and stepping into the dict
    with each (``d = d.get(k)`` / ``d = d[k]``), or a function that calls itself on a dict's values and compares
    the keys it meets with names (a recursive key search)."""
    found = []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        var = fn.args.vararg.arg if fn.args.vararg else None
        for loop in ast.walk(fn):
            if var and isinstance(loop, ast.For) and isinstance(loop.iter, ast.Name) and loop.iter.id == var:
                for a in ast.walk(loop):
                    if (isinstance(a, ast.Assign) and len(a.targets) == 1 and isinstance(a.targets[0], ast.Name)
                            and any(isinstance(n, ast.Name) and n.id == a.targets[0].id for n in ast.walk(a.value))
                            and any(isinstance(n, (ast.Subscript, ast.Call)) for n in ast.walk(a.value))):
                        found.append(fn.name)
        recursive = any(isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id == fn.name
                        for c in ast.walk(fn))
        if not recursive:
            continue
        keys = {t.elts[0].id for loop in ast.walk(fn) if isinstance(loop, (ast.For, ast.comprehension))
                and isinstance(loop.iter, ast.Call) and isinstance(loop.iter.func, ast.Attribute)
                and loop.iter.func.attr == "items" and isinstance((t := loop.target), ast.Tuple)
                and isinstance(t.elts[0], ast.Name)}
        derived = {a.targets[0].id for a in ast.walk(fn) if isinstance(a, ast.Assign) and len(a.targets) == 1
                   and isinstance(a.targets[0], ast.Name)
                   and any(isinstance(n, ast.Name) and n.id in keys for n in ast.walk(a.value))}
        if any(isinstance(c, ast.Compare) and any(isinstance(n, ast.Name) and n.id in keys | derived
                                                  for n in ast.walk(c)) for c in ast.walk(fn)):
            found.append(fn.name)
    return sorted(set(found))


#: What the checks above were written against: the two dict walkers the package had (a memory-facts reader
#: searching run.json for setting names, an expert-parallel reader stepping through raw JSON).
_OLD_WALKERS = '''
def _find_settings(obj, out):
    if isinstance(obj, dict):
        for k, v in obj.items():
            key = str(k).lstrip("-").replace("-", "_")
            if key in _SETTING_KEYS and key not in out and not isinstance(v, (dict, list)):
                out[key] = v
            _find_settings(v, out)


def _get(d, *keys):
    for k in keys:
        d = d.get(k) if isinstance(d, dict) else None
    return d if isinstance(d, bool) else None
'''


def test_the_key_walker_check_finds_walkers() -> None:
    assert _key_walkers(ast.parse(_OLD_WALKERS)) == ["_find_settings", "_get"]


#: Recursive functions over dicts that are no readers: they rewrite every value of a nested document.
NOT_READERS = {"phaseprof/safe_text.py": ["_figure"]}  # escapes every text of a plotly figure before display


def test_no_reader_searches_a_dict_for_key_names() -> None:
    found = {name: w for name, tree in MODULES.items() if (w := _key_walkers(tree)) and w != NOT_READERS.get(name)}
    assert _key_walkers(MODULES["phaseprof/safe_text.py"]) == NOT_READERS["phaseprof/safe_text.py"]
    assert "phaseprof/records.py" in MODULES and not found, f"dict walkers: {found} (read the typed record instead)"
    assert "no reader searches a dict for key names" in PROSE


def test_run_json_is_located_in_one_place() -> None:
    """Only ``records.RunDir`` names run.json; every other module asks it where a run's record is."""
    assert _where(lambda c: c == "run.json") == {"phaseprof/records.py"}
    assert "`RunDir`" in PROSE


def test_one_classifier_of_paths() -> None:
    """The names that are never traces and the content sniffing (a breakdown's string ``schema_version`` and
    its writer, a trace's ``traceEvents`` head) live in inputs.py alone; the dashboard lists through it."""
    assert _where(lambda c: c in ("MANIFEST.json", "package.json", ".schema.json")) == {"phaseprof/inputs.py"}
    sniffers = _where(lambda c: isinstance(c, bytes) and (b"schema_version" in c or b'"tool"' in c
                                                          or c == b'"traceEvents"'))
    assert sniffers == {"phaseprof/inputs.py"}
    defined = {name for name, tree in MODULES.items() for fn in ast.walk(tree)
               if isinstance(fn, ast.FunctionDef) and fn.name.startswith(("looks_like", "is_breakdown"))}
    assert defined == {"phaseprof/inputs.py"}
    sources = ast.unparse(MODULES["phaseprof/dashboard/sources.py"])
    assert "from phaseprof.inputs import" in sources and "file_kind" in sources
    assert "`file_kind`" in PROSE


def test_the_gpu_catalogue_is_read_by_one_module() -> None:
    """gpus.toml is named, parsed and matched by name in ``gpu_names`` only (``read_catalogue``, ``gpu_key``)."""
    assert _where(lambda c: isinstance(c, str) and c.endswith("gpus.toml")) == {"phaseprof/gpu_names.py"}
    # one record type holds a GPU's catalogue facts: no other class declares them as fields
    typed = {name for name, tree in MODULES.items() for cls in ast.walk(tree) if isinstance(cls, ast.ClassDef)
             for f in cls.body if isinstance(f, ast.AnnAssign) and isinstance(f.target, ast.Name)
             and f.target.id in ("memory_gb", "compute_capability", "visible_bytes")}
    assert typed == {"phaseprof/gpu_names.py"}
    key_rules = _where(lambda c: isinstance(c, str) and c == r"[\s_\-]+")
    assert key_rules == {"phaseprof/gpu_names.py"}
    assert "one GPU catalogue" in PROSE and "`GpuEntry`" in PROSE
