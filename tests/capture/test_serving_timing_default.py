"""``--serving-timing`` is the default: capture and sweep start the timed engine with vLLM's own
``async_scheduling`` default (``None``: not passed); ``--no-serving-timing`` starts one engine asked for
``async_scheduling=False``. The engine start is replaced by a stub that records what it was asked for and
stops there, so no engine runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from phaseprof.capture.inprocess import runner
from phaseprof.capture.shared.options import EngineOptions
from phaseprof.commands.main import main
from phaseprof.errors import PhaseprofError

COMMANDS = {
    "capture": ["capture", "--phase", "decode", "--tokens", "16", "--output-tokens", "4"],
    "sweep": ["sweep", "--phase", "decode", "--tokens", "16", "--output-tokens", "4", "--concurrency", "1,2"],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize(("flags", "asked"), [([], None), (["--serving-timing"], None),
                                               (["--no-serving-timing"], False)])
def test_serving_timing_is_the_default(command: str, flags: list[str], asked: bool | None, tmp_path: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[bool | None] = []

    def no_engine(opts: EngineOptions, **_kw: object) -> None:
        seen.append(opts.async_scheduling)
        raise PhaseprofError("engine start stubbed out")

    monkeypatch.setattr(runner, "open_session", no_engine)
    assert main([*COMMANDS[command], *flags, "--model", "tiny-hybrid", "--out", str(tmp_path)]) == 2
    assert seen == [asked]
    assert not list(tmp_path.iterdir())  # nothing half-written
