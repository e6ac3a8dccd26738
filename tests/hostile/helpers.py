"""What every hostile-input test asserts of a rejected input: exit 2, exactly one line on stderr holding
``words``, and no traceback anywhere."""

from __future__ import annotations

import pytest

from phaseprof.commands.main import main


def one_line_error(argv: list[str], capsys: pytest.CaptureFixture[str], *words: str) -> str:
    """Run the CLI on ``argv``; assert the one-line exit-2 failure mentioning every one of ``words``; return it."""
    rc = main(argv)
    out, err = capsys.readouterr()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2 and len(lines) == 1, (rc, err)
    assert all(w in lines[0] for w in words), lines[0]
    assert "Traceback" not in out + err
    return lines[0]
