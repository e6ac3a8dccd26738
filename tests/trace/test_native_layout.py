"""``native/src/layout.rs`` is generated from the Python column tables and event schema
(``phaseprof.trace.native_layout``): the committed file is the generated one, and the generator finds and rewrites
a stale one."""

from __future__ import annotations

from pathlib import Path

import pytest

from phaseprof.trace import native_layout


def test_committed_layout_is_the_generated_one() -> None:
    # Regenerate with: python -m phaseprof.trace.native_layout
    assert native_layout.LAYOUT_RS.read_text() == native_layout.rust_source()
    assert native_layout.main(["--check"]) == 0


def test_the_layout_follows_the_python_tables() -> None:
    text = native_layout.rust_source()
    assert "0 => $out!($f.kind.vec)," in text and "4 => $out!($f.ts)," in text  # float columns: a plain Vec
    assert "_ => $out!($f.bytes.vec)," in text and "11 => $run!($f.bytes)," in text  # the last one
    assert "$run!($f.ts)" not in text and "pub(crate) const MEMORY: i32 = 5;" in text
    assert '(b"External id", ArgKey::ExternalId),' in text and '(b"args", EventKey::Args),' in text  # schema.py's
    assert all(len(line) <= 120 for line in text.splitlines())


def test_a_stale_layout_is_found_and_rewritten(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    stale = tmp_path / "layout.rs"
    stale.write_text("// old\n")
    monkeypatch.setattr(native_layout, "LAYOUT_RS", stale)
    assert native_layout.main(["--check"]) == 1 and stale.read_text() == "// old\n"  # --check writes nothing
    assert f"stale: {stale}" in capsys.readouterr().err
    assert native_layout.main([]) == 0 and stale.read_text() == native_layout.rust_source()
