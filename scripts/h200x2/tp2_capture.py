"""TP>1 capture through vLLM's OWN profiler (one trace per rank), for issue 8.

In-process torch.profiler only sees rank 0 when vLLM runs tensor parallel (workers are separate processes), so
this uses ``profiler_config={"profiler": "torch", ...}`` + ``llm.start_profile()``/``stop_profile()``: every
worker writes its own ``*.pt.trace.json.gz`` with vLLM's ``execute_context_N(T)_generation_M(G)`` step
annotations, which ``phaseprof analyze DIR`` reads as one multi-rank run.

usage (on a 2-GPU machine, vLLM importable):
  NCCL_NVLS_ENABLE=0 python scripts/h200x2/tp2_capture.py --out DIR [--tp 2] [--ep] [--tokens 4096] [--decode 32]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--model", default="qwen3.5-35b-a3b")
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--ep", action="store_true", help="enable expert parallelism")
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--decode", type=int, default=16, help="output tokens (1 = prefill only)")
    ap.add_argument("--eager", action="store_true")
    a = ap.parse_args()
    # NVLink multicast must stay off on these shared hosts (it can take the GPUs out of service).
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    from phaseprof.presets import load_preset, materialize

    from vllm import LLM, SamplingParams  # noqa: PLC0415

    prof_dir = (a.out / "ranks").resolve()
    prof_dir.mkdir(parents=True, exist_ok=True)
    model_dir = materialize(load_preset(a.model), tempfile.mkdtemp(prefix="phaseprof-model-"))
    kw = dict(model=str(model_dir), load_format="dummy", skip_tokenizer_init=True, tensor_parallel_size=a.tp,
              enable_expert_parallel=a.ep, max_num_seqs=2, enable_prefix_caching=False,
              max_model_len=a.tokens + a.decode + 16, max_num_batched_tokens=a.tokens + a.decode + 16,
              gpu_memory_utilization=0.85, enforce_eager=a.eager, gdn_prefill_backend="triton",
              kv_cache_memory_bytes=4 << 30,
              profiler_config={"profiler": "torch", "torch_profiler_dir": str(prof_dir),
                               "torch_profiler_with_stack": False, "torch_profiler_with_memory": True,
                               "torch_profiler_use_gzip": True})
    t0 = time.time()
    llm = LLM(**kw)
    print(f"[tp2] engine up in {time.time() - t0:.0f}s", flush=True)
    rng = random.Random(0)
    prompt = {"prompt_token_ids": [rng.randrange(1000, 100000) for _ in range(a.tokens)]}
    sp = SamplingParams(max_tokens=a.decode, ignore_eos=True, detokenize=False, temperature=0.0)
    for _ in range(2):  # warm-up
        llm.generate([prompt], sp, use_tqdm=False)
    t1 = time.perf_counter()
    llm.generate([prompt], sp, use_tqdm=False)
    clean_s = time.perf_counter() - t1
    llm.start_profile()
    llm.generate([prompt], sp, use_tqdm=False)
    llm.stop_profile()
    time.sleep(5)  # workers flush their traces
    files = sorted(p.name for p in prof_dir.iterdir())
    (a.out / "tp_run.json").write_text(json.dumps({
        "model": a.model, "tensor_parallel_size": a.tp, "expert_parallel": a.ep, "tokens": a.tokens,
        "output_tokens": a.decode, "mode": "eager" if a.eager else "graph", "clean_request_s": clean_s,
        "profiler": "vllm profiler_config torch (one trace per rank)", "files": files,
        "engine_args": {k: v for k, v in kw.items() if k != "profiler_config"}}, indent=2))
    print(f"[tp2] clean request {clean_s * 1e3:.1f} ms; traces: {files}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
