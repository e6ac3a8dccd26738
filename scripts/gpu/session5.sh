#!/usr/bin/env bash
# Session 5's H200 captures, run detached on the device machine (the payload assembled first):
#   setsid nohup bash scripts/gpu/session5.sh /root/keep > /root/keep/session.log 2>&1 &
# 1. the engine selection of scripts/install.sh on this machine (real nvidia-smi),
# 2. the README's main command as written (`phaseprof capture --phase prefill --tokens 4096`),
# 3. graph-mode captures of two other model shapes for the graph attribution (qwen3-30b-a3b: 48 MoE layers;
#    llama-3.1-8b: dense), both engines sharing the GPU (each its own memory fraction, starts staggered).
set -uo pipefail
keep=${1:-/root/keep}
mkdir -p "$keep"
. "$HOME/phaseprof-payload/env.sh"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 PYTHONPATH="$PWD:$PYTHONPATH"
pp() { python3 -m phaseprof.commands.main "$@"; }
step() { echo "=== $(date -u +%T) $*" | tee -a "$keep/steps.txt"; }

step select-engine
nvidia-smi > "$keep/nvidia-smi.txt" 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader > "$keep/nvidia-smi-query-name.txt" 2>&1
python3 scripts/select_engine.py > "$keep/select-engine.txt" 2>&1

step readme-main-command
( cd "$keep" && /usr/bin/time -v python3 -m phaseprof.commands.main capture --phase prefill --tokens 4096 \
    > "$keep/readme-capture.out" 2> "$keep/readme-capture.err" ); echo "rc=$?" >> "$keep/readme-capture.out"

step other-shapes
( cd "$keep" && python3 -m phaseprof.commands.main capture --model qwen3-30b-a3b --phase prefill,decode --tokens 4096 \
    --output-tokens 32 --profile-steps 4 --out runs-qwen3-30b --engine-arg gpu_memory_utilization=0.55 \
    > "$keep/qwen3-30b.out" 2>&1; echo "rc=$?" >> "$keep/qwen3-30b.out" ) &
sleep 90
( cd "$keep" && python3 -m phaseprof.commands.main capture --model llama-3.1-8b --phase prefill,decode --tokens 4096 \
    --output-tokens 32 --profile-steps 4 --out runs-llama-8b --engine-arg gpu_memory_utilization=0.3 \
    > "$keep/llama-8b.out" 2>&1; echo "rc=$?" >> "$keep/llama-8b.out" ) &
wait
step done
