"""User rules cannot hang phaseprof or crash it: RE2 matches in linear time; bad files give one line, exit 2."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from phaseprof.classify.classifier import kernel_bucket
from phaseprof.classify.rules import load_rules
from phaseprof.errors import PhaseprofError
from tests.hostile.helpers import one_line_error

from ..conftest import REPO

TRACE = REPO / "traces/cpu/tiny-hybrid-prefill128-decode8/trace.json.gz"


def _rules(tmp_path: Path, pattern: str, examples: list[str] | None = None, name: str = "user.toml") -> Path:
    p = tmp_path / name
    ex = "" if examples is None else "examples = [" + ", ".join(f"'{e}'" for e in examples) + "]\n"
    p.write_text(f"[[kernel]]\nbucket = \"gemm\"\npatterns = ['{pattern}']\n{ex}")
    return p


def test_catastrophic_pattern_matches_long_names(tmp_path: Path) -> None:
    # Under Python's re, (a+)+$ backtracks 2^n times on "aaa...ab": 26 s at 28 characters. RE2 does not.
    rules = load_rules([_rules(tmp_path, "(a+)+$")])
    assert kernel_bucket("a" * 5000 + "b", rules) == "unknown"
    assert kernel_bucket("a" * 5000, rules) == "gemm"


def test_catastrophic_pattern_in_the_rules_own_examples(tmp_path: Path) -> None:
    # Examples are matched at load time: a non-matching 64-char example is a clean error, not a hang.
    p = _rules(tmp_path, "(x+x+)+y", examples=["x" * 64])
    with pytest.raises(PhaseprofError, match="matches none of the rule's patterns"):
        load_rules([p])


def test_rules_not_utf8(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "latin1.toml"
    p.write_bytes("[[kernel]]\nbucket = \"gemm\"\npatterns = ['caf\xe9']\n".encode("latin-1"))
    one_line_error(["analyze", str(TRACE), "--rules", str(p)], capsys, p.name, "not UTF-8")


def test_rules_2000_nested_groups(tmp_path: Path) -> None:
    # Python's re.compile recursed out (RecursionError) here; RE2 compiles it and it matches what it says.
    rules = load_rules([_rules(tmp_path, "(" * 2000 + "gemv" + ")" * 2000, examples=["my_gemv_kernel"])])
    assert kernel_bucket("my_gemv_kernel", rules) == "gemm"


def test_rules_deep_toml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "deep.toml"
    p.write_text("x = " + "[" * 5000 + "]" * 5000 + "\n")
    one_line_error(["analyze", str(TRACE), "--rules", str(p)], capsys, p.name)


def test_lookaround_is_refused_with_the_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = _rules(tmp_path, "gemm(?=_bf16)")
    one_line_error(["analyze", str(TRACE), "--rules", str(p)], capsys, p.name, "bad regex", "RE2")


def test_rules_fifo(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    os.mkfifo(tmp_path / "rules.toml")
    one_line_error(["analyze", str(TRACE), "--rules", str(tmp_path / "rules.toml")], capsys, "rules.toml",
              "not a regular file")
