#!/usr/bin/env bash
# One call on a 2-GPU H200 machine: the eager and the graph session of scripts/gpu/h200_session.py side by side,
# one per GPU, so both fit in one 10-minute call. Each writes into its own folder; at the end each mode's
# files are packed into one tar (the device tool returns at most 8 files).
#   usage: bash scripts/h200x2/both_modes.sh [extra h200_session.py args]
set -uo pipefail
out=${OUT:-$PWD/h200-out}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv > "$out/gpus.csv" 2>&1
for mode in eager graph; do
  gpu=$([ "$mode" = eager ] && echo 0 || echo 1)
  ( OUT="$out/$mode" CUDA_VISIBLE_DEVICES=$gpu bash scripts/gpu/h200_session.sh "$mode" "$@" \
      > "$out/$mode.console.txt" 2>&1 ) &
done
wait
for mode in eager graph; do
  cp "$out/$mode.console.txt" "$out/$mode/" 2>/dev/null
  tar -C "$out" -cf "$out/h200-$mode.tar" "$mode" && rm -rf "${out:?}/$mode" "$out/$mode.console.txt"
done
ls -la "$out"
