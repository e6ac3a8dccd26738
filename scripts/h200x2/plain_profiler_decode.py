"""A plain torch.profiler run around ``llm.generate`` (no phaseprof markers, vLLM's default scheduling): the
306 MB eager decode trace of benchmarks/README.md and docs/study-h200-qwen35-a3b.md, and (with --graph) the
marker-less graph-mode decode trace whose steps phaseprof infers from one full CUDA-graph launch per step.

    . ~/phaseprof-payload/env.sh && OUT=/tmp/out python3 scripts/h200x2/plain_profiler_decode.py [--graph]
"""

import gzip
import os
import random
import shutil
import sys
import time

os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from phaseprof.presets import load_preset, materialize  # noqa: E402

import torch  # noqa: E402
from vllm import LLM, SamplingParams  # noqa: E402

graph = "--graph" in sys.argv
d = materialize(load_preset("qwen3.5-35b-a3b"), "/tmp/m35")
t = time.time()
llm = LLM(model=str(d), load_format="dummy", skip_tokenizer_init=True, max_num_seqs=2, enable_prefix_caching=False,
          max_model_len=1024, max_num_batched_tokens=1024, enforce_eager=not graph, gdn_prefill_backend="triton",
          gpu_memory_utilization=0.85)
print("engine", time.time() - t, flush=True)
rng = random.Random(0)
p = {"prompt_token_ids": [rng.randrange(10, 200000) for _ in range(128)]}
sp = SamplingParams(max_tokens=32 if graph else 40, ignore_eos=True, detokenize=False)
llm.generate([p], sp, use_tqdm=False)
acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
with torch.profiler.profile(activities=acts, profile_memory=True) as prof:
    llm.generate([p], sp, use_tqdm=False)
name = "h200_graph_decode_plain_profiler" if graph else "h200_eager_decode_plain_profiler"
prof.export_chrome_trace(f"/tmp/{name}.json")
with open(f"/tmp/{name}.json", "rb") as f, gzip.open(os.path.join(os.environ["OUT"], f"{name}.json.gz"), "wb", 6) as g:
    shutil.copyfileobj(f, g)
