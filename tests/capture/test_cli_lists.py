"""``capture --phase a,b --tokens x,y``: parsing, the per-run command, and the default mode per device."""

from __future__ import annotations

import pytest

from phaseprof.capture.shared.options import Mode, Phase, parse_phases, resolve_mode
from phaseprof.commands.main import main
from phaseprof.errors import PhaseprofError
from tests.capture.test_capture_request import parse_request


def test_phases_keep_order_and_drop_repeats() -> None:
    assert parse_phases("decode,prefill,decode") == [Phase.DECODE, Phase.PREFILL]
    assert parse_phases(" prefill ") == [Phase.PREFILL]
    with pytest.raises(PhaseprofError, match="bad --phase 'mixed'"):
        parse_phases("prefill,mixed")
    with pytest.raises(PhaseprofError, match="--phase needs"):
        parse_phases(",")


def test_each_run_records_its_own_combination() -> None:
    request = parse_request(["--phase", "prefill,decode", "--tokens", "512,4096", "--reps", "5"])
    cmd = request.command(phase=Phase.DECODE, tokens=4096)
    assert cmd[:6] == ["phaseprof", "capture", "--phase", "decode", "--tokens", "4096"]
    assert cmd[cmd.index("--reps") + 1] == "5" and cmd.count("--phase") == cmd.count("--tokens") == 1


def test_default_mode_is_what_vllm_serves_with() -> None:
    assert resolve_mode(None, cuda=True) is Mode.GRAPH
    assert resolve_mode(None, cuda=False) is Mode.EAGER  # no CUDA graphs on a CPU
    assert resolve_mode(Mode.EAGER, cuda=True) is Mode.EAGER


@pytest.mark.parametrize(("args", "message"), [
    (["--phase", "prefill,sideways"], "bad --phase 'sideways'"),
    (["--tokens", "512,abc"], "bad --tokens value 'abc'"),
    (["--max-trace-mb", "0"], "--max-trace-mb must be more than 0 and at most 4096"),
    (["--max-trace-mb", "inf"], "--max-trace-mb must be more than 0 and at most 4096, got inf"),
])
def test_bad_lists_fail_before_vllm(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["capture", "--model", "tiny-hybrid", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
