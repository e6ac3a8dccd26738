#!/usr/bin/env bash
# Session 3's whole H200x2 pipeline, run detached on the device so it outlives each 10-minute call:
#   setsid nohup bash scripts/gpu/session3/pipeline.sh TOTAL_S SERVER_S >/root/s3/pipeline.out 2>&1 </dev/null &
# then `bash scripts/gpu/session3/collect.sh WAIT_S` in each later call returns what has finished.
# TOTAL_S: seconds from now by which everything must have ended; the last SERVER_S of them are kept for the
# live-server items. Two lanes first, one GPU each (each engine alone on its GPU, so timings are undisturbed):
#   GPU0: own-eager (vLLM's own profiler, eager, with stacks) -> fp8 (phaseprof capture, graph)
#   GPU1: own-graph (same, graph mode, + CUDA-graph capture trace) -> inproc-prefill-graph -> inproc-decode-graph
# then both GPUs: server-tp2-ep (vllm serve TP2 + expert parallel) -> server-tp1 (GPU0) if time is left.
# Each item: output in $W/items/NAME/, log in $W/logs/NAME.log, exit status in $W/items/NAME.rc.
set -u
total=${1:?usage: pipeline.sh TOTAL_S SERVER_S}
server_s=${2:?usage: pipeline.sh TOTAL_S SERVER_S}
W=${S3_WORK:-/root/s3}
t0=$(date +%s)
deadline=$((t0 + total))
lane_end=$((deadline - server_s))
mkdir -p "$W/items" "$W/logs" "$W/repo"
REPO=$PWD
# A private copy of the code: the device tool re-syncs the checkout at every call.
cp -a phaseprof scripts pyproject.toml "$W/repo/"
cd "$W/repo" || exit 1
. "$HOME/phaseprof-payload/env.sh"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 PYTHONPATH="$W/repo${PYTHONPATH:+:$PYTHONPATH}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PP=(python3 -c 'import sys; from phaseprof.cli import main; sys.exit(main())')

log() { echo "[$(date -u +%T) +$(( $(date +%s) - t0 ))s] $*" | tee -a "$W/logs/pipeline.log"; }

# run_item NAME GPUS MIN_S MAX_S END_EPOCH CMD...: start only when MIN_S still fit before END_EPOCH.
run_item() {
  local name=$1 gpus=$2 min=$3 max=$4 end=$5; shift 5
  local left=$(( end - $(date +%s) ))
  if [ "$left" -lt "$min" ]; then
    log "SKIP $name: ${left}s left < ${min}s"; echo skipped > "$W/items/$name.rc"; return 0
  fi
  local lim=$(( left < max ? left : max ))
  mkdir -p "$W/items/$name"
  log "START $name gpus=$gpus limit=${lim}s: $*"
  CUDA_VISIBLE_DEVICES=$gpus timeout -k 20 "$lim" "$@" > "$W/logs/$name.log" 2>&1
  local rc=$?
  if [ -f "$W/items/$name/server.pgid" ]; then kill -9 -- "-$(cat "$W/items/$name/server.pgid")" 2>/dev/null; fi
  nvidia-smi --query-gpu=index,memory.used --format=csv,noheader >> "$W/logs/$name.log" 2>&1
  echo "$rc" > "$W/items/$name.rc"
  log "END $name rc=$rc"
}

log "pipeline: total ${total}s, lanes until +$((lane_end - t0))s, servers until +${total}s"
nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv >> "$W/logs/pipeline.log" 2>&1
S3=scripts/gpu/session3
(
  run_item own-eager 0 200 420 "$lane_end" python3 $S3/own_profile.py --mode eager --out "$W/items/own-eager"
  run_item fp8 0 200 420 "$lane_end" env VLLM_USE_DEEP_GEMM=0 "${PP[@]}" capture --phase prefill --tokens 4096 \
    --quant fp8 --mode graph --out "$W/items/fp8" -v
) &
(
  run_item own-graph 1 300 560 "$lane_end" python3 $S3/own_profile.py --mode graph --capture-trace \
    --out "$W/items/own-graph"
  run_item inproc-prefill-graph 1 180 360 "$lane_end" "${PP[@]}" capture --phase prefill --tokens 4096 --mode graph \
    --out "$W/items/inproc-prefill-graph" -v
  run_item inproc-decode-graph 1 180 360 "$lane_end" "${PP[@]}" capture --phase decode --tokens 4096 --mode graph \
    --out "$W/items/inproc-decode-graph" -v
) &
wait
log "lanes done"
# Server scripts fixed after launch reach the device with the next call's checkout: take them now.
cp "$REPO"/scripts/gpu/session3/*.py scripts/gpu/session3/ 2>/dev/null
run_item server-tp2-ep 0,1 300 "$server_s" "$deadline" python3 $S3/serve_and_measure.py --out "$W/items/server-tp2-ep" \
  --gpus 0,1 --tp 2 --ep --port 8000
run_item server-tp1 0 240 400 "$deadline" python3 $S3/serve_and_measure.py --out "$W/items/server-tp1" \
  --gpus 0 --tp 1 --port 8001
log "pipeline done"
touch "$W/pipeline.done"
