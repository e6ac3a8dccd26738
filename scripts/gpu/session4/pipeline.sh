#!/usr/bin/env bash
# Session 4's H200x2 pipeline, detached so it outlives each 10-minute device call:
#   setsid nohup bash scripts/gpu/session4/pipeline.sh TOTAL_S >/root/s4/pipeline.out 2>&1 </dev/null &
# then `S3_WORK=/root/s4 bash scripts/gpu/session3/collect.sh WAIT_S` in each later call returns what finished.
# Stage 1, one GPU each:  GPU0 server-graph (vllm serve, graph mode, + phaseprof capture/sweep --server)
#                         GPU1 inproc-graph (phaseprof capture --phase prefill,decode --tokens 4096 --mode graph)
# Stage 2, both GPUs:     server-tp2-ep (vllm serve TP2 + expert parallel, eager, + phaseprof capture --server)
# Stage 3, one GPU each:  eager-hooks (GPU1) and eager-stack (GPU0): phaseprof capture --mode eager with the
#                         module hierarchy from module hooks / with_stack; they take the newest phaseprof from the
#                         checkout and wait (bounded) for scripts/gpu/session4/GO to appear there first.
set -u
total=${1:?usage: pipeline.sh TOTAL_S}
W=/root/s4
t0=$(date +%s)
deadline=$((t0 + total))
mkdir -p "$W/items" "$W/logs" "$W/repo"
REPO=$PWD
cp -a phaseprof scripts pyproject.toml "$W/repo/"
cd "$W/repo" || exit 1
. "$HOME/phaseprof-payload/env.sh"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 PYTHONPATH="$W/repo:$HOME/phaseprof-wheels${PYTHONPATH:+:$PYTHONPATH}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PP=(python3 -c 'import sys; from phaseprof.cli import main; sys.exit(main())')
S4=scripts/gpu/session4

log() { echo "[$(date -u +%T) +$(( $(date +%s) - t0 ))s] $*" | tee -a "$W/logs/pipeline.log"; }

# run_item NAME GPUS MIN_S MAX_S CMD...: start only when MIN_S still fit before the deadline.
run_item() {
  local name=$1 gpus=$2 min=$3 max=$4; shift 4
  local left=$(( deadline - $(date +%s) ))
  if [ "$left" -lt "$min" ]; then
    log "SKIP $name: ${left}s left < ${min}s"; echo skipped > "$W/items/$name.rc"; return 0
  fi
  local lim=$(( left < max ? left : max ))
  mkdir -p "$W/items/$name"
  log "START $name gpus=$gpus limit=${lim}s: $*"
  local s=$(date +%s)
  CUDA_VISIBLE_DEVICES=$gpus timeout -k 20 "$lim" "$@" > "$W/logs/$name.log" 2>&1
  local rc=$?
  if [ -f "$W/items/$name/server.pgid" ]; then kill -9 -- "-$(cat "$W/items/$name/server.pgid")" 2>/dev/null; fi
  nvidia-smi --query-gpu=index,memory.used --format=csv,noheader >> "$W/logs/$name.log" 2>&1
  echo "$rc" > "$W/items/$name.rc"
  log "END $name rc=$rc after $(( $(date +%s) - s ))s"
}

refresh() {  # the newest phaseprof from the checkout (the device tool re-syncs it at every call)
  local waited=0
  while [ ! -f "$REPO/scripts/gpu/session4/GO" ] && [ "$waited" -lt "$1" ]; do sleep 5; waited=$((waited + 5)); done
  cp -a "$REPO/phaseprof" "$REPO/scripts" . 2>/dev/null
  log "refreshed code (GO $( [ -f "$REPO/scripts/gpu/session4/GO" ] && echo present || echo absent ), waited ${waited}s)"
}

log "pipeline: total ${total}s"
python3 -c 'import re2, vllm, torch; print("re2 ok; vllm", vllm.__version__, "torch", torch.__version__)' >> "$W/logs/pipeline.log" 2>&1
nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv >> "$W/logs/pipeline.log" 2>&1
(
  run_item server-graph 0 300 560 python3 $S4/serve_phaseprof.py --out "$W/items/server-graph" --gpus 0 --port 8001 \
    --sweep
) &
(
  run_item inproc-graph 1 300 560 "${PP[@]}" capture --phase prefill,decode --tokens 4096 --mode graph \
    --out "$W/items/inproc-graph" -v
) &
wait
log "stage 1 done"
cp "$REPO"/scripts/gpu/session4/*.py $S4/ 2>/dev/null
run_item server-tp2-ep 0,1 240 420 python3 $S4/serve_phaseprof.py --out "$W/items/server-tp2-ep" --gpus 0,1 --tp 2 \
  --ep --eager --port 8002
log "stage 2 done"
refresh 240
if "${PP[@]}" capture --help 2>/dev/null | grep -q -- --hierarchy; then
  (
    run_item eager-hooks 1 200 420 "${PP[@]}" capture --phase prefill,decode --tokens 4096 --mode eager \
      --hierarchy hooks --out "$W/items/eager-hooks" -v
  ) &
  (
    run_item eager-stack 0 200 420 "${PP[@]}" capture --phase prefill,decode --tokens 4096 --mode eager \
      --hierarchy stack --out "$W/items/eager-stack" -v
  ) &
  wait
else
  log "no --hierarchy option in this phaseprof: stage 3 skipped"
fi
log "pipeline done"
touch "$W/pipeline.done"
