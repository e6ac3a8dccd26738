#!/usr/bin/env bash
# Session 5, second H200 call: the routing captures of issue 30 (one eager engine), run detached:
#   setsid nohup bash scripts/gpu/session5_routing.sh /root/keep > /root/keep/session.log 2>&1 &
set -uo pipefail
keep=${1:-/root/keep}
mkdir -p "$keep"
. "$HOME/phaseprof-payload/env.sh"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 VLLM_USE_DEEP_GEMM=0 PYTHONPATH="$PWD:$PYTHONPATH"
echo "=== $(date -u +%T) routing" >> "$keep/steps.txt"
python3 scripts/gpu/routing_captures.py --out "$keep/routing" --model qwen3.5-35b-a3b --batch 64 --reps 3 \
  > "$keep/routing.out" 2>&1
echo "rc=$?" >> "$keep/routing.out"
echo "=== $(date -u +%T) done" >> "$keep/steps.txt"
