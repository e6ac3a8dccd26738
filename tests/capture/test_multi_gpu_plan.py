"""TP/EP capture planning: pure parts and the errors a CPU machine gives (the GPU path ran on two H200s)."""

from pathlib import Path

import pytest

from phaseprof.capture.inprocess.multi_gpu import check_gpus, parallel_kwargs
from phaseprof.commands.main import main
from phaseprof.errors import EnvironmentProblem, PhaseprofError


def test_parallel_kwargs_use_vllms_own_profiler(tmp_path):
    kw = parallel_kwargs({"model": "m", "enforce_eager": True}, tp=2, ep=True, profile_dir=tmp_path / "ranks",
                         fields={"profiler_config", "tensor_parallel_size"})
    assert kw["tensor_parallel_size"] == 2 and kw["enable_expert_parallel"] is True
    assert kw["profiler_config"]["profiler"] == "torch"
    assert Path(kw["profiler_config"]["torch_profiler_dir"]).is_absolute()  # vLLM requires an absolute path
    assert kw["model"] == "m" and kw["enforce_eager"] is True


def test_old_vllm_without_profiler_config_is_a_clear_error(tmp_path):
    with pytest.raises(EnvironmentProblem, match="profiler_config"):
        parallel_kwargs({}, tp=2, ep=False, profile_dir=tmp_path, fields={"tensor_parallel_size"})


def test_gpu_count_checks():
    check_gpus(2, 2)
    with pytest.raises(EnvironmentProblem, match="needs 4 CUDA GPUs on this host; it has 2"):
        check_gpus(4, 2)
    with pytest.raises(PhaseprofError, match="at least 1"):
        check_gpus(0, 8)


def test_cli_expert_parallel_without_tp_is_one_line(capsys):
    assert main(["capture", "--model", "tiny-hybrid", "--enable-expert-parallel"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--tensor-parallel-size of at least 2" in err
