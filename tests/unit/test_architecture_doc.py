"""docs/architecture.md stays a map of the code: it names every package folder under ``phaseprof/`` (and every
layer the import-direction test knows)."""

from __future__ import annotations

from pathlib import Path

from tests.unit.test_import_direction import LAYERS

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
