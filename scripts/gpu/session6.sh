#!/usr/bin/env bash
# Session 6's H200 runs, detached on the device machine (the payload assembled first):
#   setsid nohup bash scripts/gpu/session6.sh /root/keep > /root/keep/session.log 2>&1 &
# Stage A: the 35B-A3B preset served by `vllm serve` (graph, bf16, vLLM's defaults: async scheduling on) and
#   swept by phaseprof (issue 26, scripts/gpu/session6_serve_sweep.py); while the server compiles, the eager
#   references of llama-3.1-8b (issue 24) and its in-process --serving-timing capture (issue 26); the sweeps start once that engine is gone (timings alone on the GPU).
# Stage B: the 35B-A3B eager engine records the routing of a c = 64 decode batch (issue 30), then the eager
#   references of qwen3-30b-a3b (issue 24); meanwhile an FP8 server starts and is swept once both are gone.
set -uo pipefail
keep=${1:-/root/keep}
mkdir -p "$keep"
. "$HOME/phaseprof-payload/env.sh"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 PYTHONPATH="$PWD:$PYTHONPATH"
step() { echo "=== $(date -u +%T) $*" | tee -a "$keep/steps.txt"; }
( while true; do nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader >> "$keep/gpu-mem.txt" \
    2>&1; sleep 10; done ) &
monitor=$!

eager_ref() {  # model util out
  ( cd "$keep" && python3 -m phaseprof.commands.main capture --model "$1" --mode eager --hierarchy hooks \
      --phase prefill,decode --tokens 4096 --output-tokens 32 --profile-steps 4 --reps 2 --warmup 1 \
      --out "$3" --engine-arg gpu_memory_utilization="$2" > "$keep/$3.out" 2>&1; echo "rc=$?" >> "$keep/$3.out" )
}

step stage-A
python3 scripts/gpu/session6_serve_sweep.py --out "$keep/serve-bf16" --quant bf16 --port 8001 --gpu-mem 0.66 \
  --kv-gib 18 --gate "$keep/gate-A" > "$keep/serve-bf16.out" 2>&1 &
serve_a=$!
sleep 20
step llama-eager
eager_ref llama-3.1-8b 0.16 runs-llama-8b-eager
step llama-serving-timing  # issue 26: the in-process --serving-timing path on a GPU (two engines, one process)
( cd "$keep" && python3 -m phaseprof.commands.main capture --model llama-3.1-8b --phase decode --tokens 1024 \
    --output-tokens 128 --serving-timing --reps 3 --warmup 1 --profile-steps 2 --out runs-llama-8b-serving \
    --engine-arg gpu_memory_utilization=0.16 > "$keep/runs-llama-8b-serving.out" 2>&1
  echo "rc=$?" >> "$keep/runs-llama-8b-serving.out" )
touch "$keep/gate-A"
wait $serve_a; echo "rc=$?" >> "$keep/serve-bf16.out"

step stage-B
( VLLM_USE_DEEP_GEMM=0 python3 scripts/gpu/routing_captures.py --out "$keep/routing" --model qwen3.5-35b-a3b \
    --batch 64 --only-batch --engine-arg gpu_memory_utilization=0.52 > "$keep/routing.out" 2>&1
  echo "rc=$?" >> "$keep/routing.out"
  step qwen3-30b-eager
  eager_ref qwen3-30b-a3b 0.45 runs-qwen3-30b-eager
  touch "$keep/gate-B" ) &
stage_b=$!
sleep 30
step fp8-server
python3 scripts/gpu/session6_serve_sweep.py --out "$keep/serve-fp8" --quant fp8 --port 8002 --gpu-mem 0.42 \
  --kv-gib 16 --gate "$keep/gate-B" > "$keep/serve-fp8.out" 2>&1
echo "rc=$?" >> "$keep/serve-fp8.out"
wait $stage_b
kill $monitor
step done
