"""The test folders mirror the package: a folder under ``tests/`` is named after the sub-package of ``phaseprof/``
it tests (``tests/trace/`` for ``phaseprof/trace/``), or is one of a few kinds of test listed below with why; a
test file directly in ``tests/`` is named after the top-level module it tests (``tests/test_records.py`` for
``phaseprof/records.py``). A new test then has one obvious home, and no grab-bag folder grows back."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "phaseprof"
TESTS = REPO / "tests"

#: Folders grouped by the kind of test rather than by package, and why each is its own folder.
KINDS = {
    "golden": "expected JSON of whole analyses on committed traces (--update-golden rewrites it)",
    "hostile": "a reproducer per class of hostile input, across every reader and renderer",
    "h200": "facts read from the raw events of the real H200 captures, compared with phaseprof",
    "packaging": "the built wheel and its native scanner",
    "structure": "the repository's own rules: import direction, docs that map the code, this layout",
    "diff": "the diff feature end to end: report/diff.py, report/diff_markdown.py, commands/diff.py together",
}


def sub_packages(package: Path) -> set[str]:
    return {d.name for d in package.iterdir() if (d / "__init__.py").is_file()}


def top_level_modules(package: Path) -> set[str]:
    return {p.stem for p in package.glob("*.py") if not p.name.startswith("_")}


def misplaced(tests: Path, package: Path) -> list[str]:
    """What in ``tests`` breaks the layout, one line each (empty when it holds)."""
    packages, modules = sub_packages(package), top_level_modules(package)
    found = []
    for d in sorted(p for p in tests.iterdir() if p.is_dir()):
        if d.name == "__pycache__" or d.name.startswith("."):
            continue
        if d.name not in packages and d.name not in KINDS:
            found.append(f"tests/{d.name}/: neither a sub-package of phaseprof/ nor a listed kind")
        elif not (d / "__init__.py").is_file():
            found.append(f"tests/{d.name}/: no __init__.py (its relative imports and same-named files break)")
    for f in sorted(tests.glob("test_*.py")):
        if f.stem.removeprefix("test_") not in modules:
            found.append(f"tests/{f.name}: names no top-level module phaseprof/{f.stem.removeprefix('test_')}.py")
    return found


def test_every_test_folder_mirrors_the_package_or_is_a_listed_kind() -> None:
    assert not misplaced(TESTS, PACKAGE), "\n".join(misplaced(TESTS, PACKAGE))


def test_the_kinds_are_not_package_names() -> None:
    """A listed kind that is also a sub-package would hide a folder that should hold that package's tests."""
    assert not set(KINDS) & sub_packages(PACKAGE)
    assert {"analysis", "trace"} <= sub_packages(PACKAGE) and "records" in top_level_modules(PACKAGE)


def test_the_check_catches_what_it_is_for(tmp_path: Path) -> None:
    package, tests = tmp_path / "pkg", tmp_path / "tests"
    (package / "trace").mkdir(parents=True)
    (package / "trace" / "__init__.py").touch()
    (package / "records.py").touch()
    for folder in ("trace", "golden", "unit", "bare"):
        (tests / folder).mkdir(parents=True)
        if folder != "bare":
            (tests / folder / "__init__.py").touch()
    (tests / "__pycache__").mkdir()
    (tests / "test_records.py").touch()
    (tests / "test_everything.py").touch()
    got = misplaced(tests, package)
    assert got == ["tests/bare/: neither a sub-package of phaseprof/ nor a listed kind",
                   "tests/unit/: neither a sub-package of phaseprof/ nor a listed kind",
                   "tests/test_everything.py: names no top-level module phaseprof/everything.py"], got
    (package / "bare").mkdir()
    (package / "bare" / "__init__.py").touch()
    assert misplaced(tests, package)[0].startswith("tests/bare/: no __init__.py")
