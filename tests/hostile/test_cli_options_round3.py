"""The CLI-options surface of hostile-input round 3: the options added since round 2 (``capture --ray``,
``--max-trace-mb`` on the server path, ``--decode-server``/``--link``, ``pareto --max-instances``/``--disagg``/
``--ceilings``) take any value a user could type and end in exit 0, or 2/3 with one line: never a traceback.

``capture --server`` points at the discard port (nothing answers): a value that passes every check ends in one
"cannot reach" line (exit 3), before any engine or Ray cluster starts. ``--ray auto``/``local`` are left out
(they would look for, or start, a real cluster)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phaseprof.commands.main import main
from tests.hostile.helpers import one_line_error

from ..conftest import REPO

NOBODY = "http://127.0.0.1:9"
SWEEP = REPO / "traces/h200/serving/bf16/decode"

numbers = st.one_of(st.integers(-(2**70), 2**70).map(str), st.floats().map(repr),
                    st.sampled_from(["0", "-0", "1e300", "nan", "inf", "-inf", "0x10", "1_000", "", " 5", "٣"]))
words = st.one_of(st.text(max_size=20), st.sampled_from(["nope", "host:99999", "ray://x", "[::1]:6379", "a:1",
                                                         "../../etc/passwd", "/dev/zero", "\x1b[31m"]))
ray_words = words.filter(lambda w: w.strip().lower() not in ("auto", "local"))

OPTIONS = {
    "capture-ray": (lambda v: ["capture", "--server", NOBODY, "--trace-dir", "{tmp}", "--ray", v], ray_words),
    "capture-max-trace-mb": (lambda v: ["capture", "--server", NOBODY, "--trace-dir", "{tmp}", "--max-trace-mb", v],
                             numbers),
    "capture-request-timeout": (lambda v: ["capture", "--server", NOBODY, "--trace-dir", "{tmp}",
                                           "--request-timeout", v], numbers),
    "capture-link": (lambda v: ["capture", "--server", NOBODY, "--trace-dir", "{tmp}", "--decode-server", NOBODY,
                                "--decode-trace-dir", "{tmp}", "--link", v], words),
    "pareto-max-instances": (lambda v: ["pareto", str(SWEEP), "--disagg", str(SWEEP), "--max-instances", v],
                             numbers),
    "pareto-ceilings": (lambda v: ["pareto", str(SWEEP), "--ceilings", v], words),
    "pareto-link": (lambda v: ["pareto", str(SWEEP), "--disagg", str(SWEEP), "--link", v], words),
}


@pytest.mark.parametrize("name", list(OPTIONS))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_value_is_a_result_or_one_line(name: str, data: st.DataObject, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    build, values = OPTIONS[name]
    value = data.draw(values)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in build(value)]
    code = main(argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code in (0, 2, 3), (code, err)
    if code:
        # click's usage errors are a usage line, a hint and the error; ours are exactly one line
        assert len(lines) == 1 or (code == 2 and lines[0].startswith("Usage:")), err


@pytest.mark.parametrize("value", ["nope", "host:99999", "1.2.3.4:", "ray://h:1x", "a b:1"])
def test_capture_ray_address_is_checked_first(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              value: str) -> None:
    one_line_error(["capture", "--server", NOBODY, "--trace-dir", str(tmp_path), "--ray", value], capsys,
                   f"--ray {value!r}: expected 'auto', 'local' or HOST:PORT")
