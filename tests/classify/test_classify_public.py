"""The default rules on the public traces: real facts about real kernels, and little unknown time.

Traces are read with plain gzip+json here so this test depends on the classifier alone.
"""

from __future__ import annotations

import gzip
import json
from functools import lru_cache
from pathlib import Path

import pandas as pd
import pytest

from phaseprof.classify.buckets import Bucket
from phaseprof.classify.classifier import classify_kernels
from phaseprof.classify.rules import load_rules

PUBLIC = (Path(__file__).parents[2] / "../shared/traces/public").resolve()
pytestmark = [
    pytest.mark.public,
    pytest.mark.skipif(not PUBLIC.is_dir(), reason=f"public traces not present at {PUBLIC}"),
]

H100_LLAMA = "traceMap__1_h100_1000isl_10osl_32con.pt.trace.json.gz"
MI300X_LLAMA = "traceMap__1_mi300x_1000isl_10osl_32con.pt.trace.json.gz"
B200_GPT_OSS = "TraceLens__b200__eager_trace.json.gz"
MI300X_GPT_OSS = "TraceLens__inference__vllm_prefilldecode_piecewise__graph_execution.json.gz"
# vLLM and SGLang inference traces (the training traces in the folder are not the target)
INFERENCE = [
    H100_LLAMA,
    MI300X_LLAMA,
    B200_GPT_OSS,
    MI300X_GPT_OSS,
    "TraceLens__inference__vllm_decode_full__graph_execution.json.gz",
    "TraceLens__inference__vllm_decode_full__capture_traces__graph_capture_rank_0.1773709742341309550.pt.trace.json.gz",
    "TraceLens__inference__sglang_decode__sglang_Qwen3-8B_decode.json.gz",
    "TraceLens__inference__sglang_prefilldecode__sglang_Qwen3-8B_prefilldecode.json.gz",
]
RULES = load_rules()


@lru_cache(maxsize=None)
def kernels(file: str) -> pd.DataFrame:
    """One row per GPU kernel (cat "kernel", legacy "Kernel"): name, dur_us, bucket."""
    with gzip.open(PUBLIC / file) as fh:
        data = json.load(fh)
    events = data["traceEvents"] if isinstance(data, dict) else data
    rows = [(e["name"], float(e.get("dur", 0))) for e in events
            if e.get("ph") == "X" and e.get("cat") in ("kernel", "Kernel")]
    df = pd.DataFrame(rows, columns=["name", "dur_us"])
    df["bucket"] = classify_kernels(df["name"], RULES)
    return df


def share_pct(df: pd.DataFrame, bucket: Bucket) -> float:
    return 100 * df.loc[df["bucket"] == bucket, "dur_us"].sum() / df["dur_us"].sum()


@pytest.mark.parametrize("file", INFERENCE)
def test_unknown_kernel_time_is_small(file):
    df = kernels(file)
    unknown = df[df["bucket"] == Bucket.UNKNOWN].groupby("name")["dur_us"].sum().sort_values()
    assert share_pct(df, Bucket.UNKNOWN) < 5.0, f"unknown kernels by time:\n{unknown.tail(10)}"


def test_b200_gpt_oss_time_is_mostly_moe():
    df = kernels(B200_GPT_OSS)
    assert share_pct(df, Bucket.MOE) > 40  # measured 50.7%: two bmm_* expert GEMMs + moe::dev routing
    moe = set(df.loc[df["bucket"] == Bucket.MOE, "name"])
    assert any(n.startswith("bmm_") for n in moe)
    assert any("moe::dev::routing::" in n for n in moe)
    assert share_pct(df, Bucket.ATTENTION) > 2  # fmhaSm100a* and the KV-cache write


def test_mi300x_gpt_oss_matmul_ogs_is_moe():
    df = kernels(MI300X_GPT_OSS)
    assert (df.loc[df["name"].str.startswith("_matmul_ogs_"), "bucket"] == Bucket.MOE).all()
    assert share_pct(df, Bucket.MOE) > 60  # measured 80.4%


def test_mi300x_cijk_kernels_are_gemm():
    for file in (MI300X_LLAMA, MI300X_GPT_OSS):
        df = kernels(file)
        cijk = df[df["name"].str.startswith("Cijk_")]
        assert len(cijk) > 0
        assert (cijk["bucket"] == Bucket.GEMM).all()
    assert share_pct(kernels(MI300X_LLAMA), Bucket.GEMM) > 40  # measured 57.9%


def test_h100_llama_nccl_and_custom_all_reduce_are_communication():
    df = kernels(H100_LLAMA)
    comm = df[df["name"].str.startswith("nccl") | df["name"].str.contains("cross_device_reduce")]
    assert len(comm) > 0
    assert (comm["bucket"] == Bucket.COMMUNICATION).all()
    assert share_pct(df, Bucket.GEMM) > 50  # a dense 70B model: GEMMs dominate (measured 75.9%)
    fa3 = df[df["name"].str.contains("FlashAttnFwdSm90")]
    assert len(fa3) > 0 and (fa3["bucket"] == Bucket.ATTENTION).all()  # not gemm, despite cutlass::
