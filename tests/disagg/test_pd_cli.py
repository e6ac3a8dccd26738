"""``capture --server P --decode-server D`` refuses bad requests in one line (exit 2) before any request is sent,
and the proxy side speaks what vLLM's PD proxy sends."""

from __future__ import annotations

from pathlib import Path

import pytest

from phaseprof.commands.main import main
from phaseprof.disagg.exchange import TO_PREFILL, kv_params, prefill_body
from phaseprof.errors import PhaseprofError

NOBODY = "http://127.0.0.1:9"  # discard port: nothing answers; a test that reached it would fail differently


def _run(tmp_path: Path, *extra: str) -> int:
    return main(["capture", "--tokens", "64", "--output-tokens", "4", "--out", str(tmp_path / "out"), *extra])


@pytest.mark.parametrize(("args", "says"), [
    (["--decode-server", NOBODY], "--decode-server goes with --server"),
    (["--server", NOBODY, "--decode-server", NOBODY, "--decode-trace-dir", "."], "--decode-trace-dir"),
    (["--server", NOBODY, "--trace-dir", ".", "--decode-server", NOBODY], "--decode-trace-dir"),
    (["--server", NOBODY, "--trace-dir", ".", "--decode-server", NOBODY, "--decode-trace-dir", ".",
      "--link", "warp-drive"], "unknown link"),
    (["--server", NOBODY, "--trace-dir", ".", "--decode-server", NOBODY, "--decode-trace-dir", ".",
      "--output-tokens", "1"], "--output-tokens of at least 2"),
    (["--server", NOBODY, "--trace-dir", ".", "--decode-server", NOBODY, "--decode-trace-dir", ".",
      "--tokens", "64,128"], "one --tokens value"),
])
def test_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], says: str) -> None:
    assert _run(tmp_path, *args) == 2
    err = capsys.readouterr().err.strip()
    assert says in " ".join(err.split()), err
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_missing_trace_directory_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(tmp_path, "--server", NOBODY, "--trace-dir", str(tmp_path / "nope"), "--decode-server", NOBODY,
                "--decode-trace-dir", str(tmp_path)) == 2
    assert "trace directory not found" in capsys.readouterr().err


def test_prefill_request_is_the_pd_proxys() -> None:
    """vLLM's toy proxy: one token, no stream, do_remote_decode with every remote_* key present and empty."""
    body = {"model": "m", "prompt": [1, 2, 3], "max_tokens": 32, "min_tokens": 32, "ignore_eos": True,
            "stream_options": {"include_usage": True}}
    p = prefill_body(body)
    assert p["max_tokens"] == 1 and p["stream"] is False and "min_tokens" not in p and "stream_options" not in p
    assert p["kv_transfer_params"] == TO_PREFILL and p["prompt"] == [1, 2, 3] and p["ignore_eos"] is True
    assert body["max_tokens"] == 32  # the decode request keeps its own


def test_prefill_answer_without_connector_parameters_is_one_line() -> None:
    for answer in ({"choices": []}, {"kv_transfer_params": None}, {"kv_transfer_params": {}}, "text", None):
        with pytest.raises(PhaseprofError, match="without kv_transfer_params.*NixlConnector"):
            kv_params(answer, "http://p:1")
    params = {"remote_engine_id": "e", "remote_block_ids": [[1]], "remote_host": "h", "remote_port": 5600}
    assert kv_params({"kv_transfer_params": params}, "http://p:1") == params


def test_record_reads_are_bounded(tmp_path: Path) -> None:
    """handoff.json and run.json are read whole only as regular files of at most MAX_RECORD_BYTES."""
    import os

    from phaseprof.disagg.records import read_handoff
    from phaseprof.records import MAX_RECORD_BYTES, RunRecord

    big = tmp_path / "handoff.json"
    with big.open("wb") as f:
        f.truncate(MAX_RECORD_BYTES + 1)  # sparse: nothing is written
    with pytest.raises(PhaseprofError, match="over 64 MB: not a handoff.json"):
        read_handoff(big)
    fifo = tmp_path / "run.json"
    os.mkfifo(fifo)
    with pytest.raises(PhaseprofError, match="not a regular file"):
        RunRecord.read(fifo)
