#!/usr/bin/env bash
# Return what pipeline.sh has finished: `bash scripts/gpu/session3/collect.sh WAIT_S` (in a device call).
# Waits up to WAIT_S seconds (less when the pipeline is done), then puts into $OUT, at most 8 files:
#   status.tgz (pipeline log, every item's log and .rc, nvidia-smi) and, for each finished item not sent before,
#   item--NAME.tar (its output directory; split into item--NAME.tar.partNN of 15 MiB when larger), as many as
#   fit in 8 files and 60 MiB; the rest waits for the next call.
set -u
wait_s=${1:-0}
W=${S3_WORK:-/root/s3}
out=${OUT:?OUT is not set}
t0=$(date +%s)
while [ $(( $(date +%s) - t0 )) -lt "$wait_s" ] && [ ! -f "$W/pipeline.done" ]; do sleep 5; done
touch "$W/sent.list"
mkdir -p "$W/pack"
nvidia-smi --query-gpu=index,memory.used,utilization.gpu --format=csv > "$W/logs/nvidia-smi.txt" 2>&1
# Logs go gzipped (vLLM's verbose logs are long) but whole.
tar -czf "$out/status.tgz" -C "$W" logs $(cd "$W" && ls items/*.rc 2>/dev/null) pipeline.out 2>/dev/null
for rcf in "$W"/items/*.rc; do  # pack each finished item once
  [ -f "$rcf" ] || continue
  name=$(basename "$rcf" .rc)
  grep -qx "$name" "$W/sent.list" && continue
  echo "$name" >> "$W/sent.list"
  [ -d "$W/items/$name" ] || continue
  tar -cf "$W/pack/item--$name.tar" -C "$W/items" "$name"
  if [ "$(stat -c %s "$W/pack/item--$name.tar")" -gt $((15 * 1024 * 1024)) ]; then
    split -b 15M -d -a 2 "$W/pack/item--$name.tar" "$W/pack/item--$name.tar.part"
    rm "$W/pack/item--$name.tar"
  fi
done
files=1
bytes=$(stat -c %s "$out/status.tgz")
order="own-eager own-graph fp8 server-tp2-ep inproc-prefill-graph inproc-decode-graph server-tp1"
for f in $(for n in $order; do ls "$W/pack" | grep "^item--$n\.tar" | sort; done; ls "$W/pack" | sort); do
  # send what fits (8 files, 60 MiB), most important first; the rest waits for the next call
  [ -f "$W/pack/$f" ] || continue
  size=$(stat -c %s "$W/pack/$f")
  if [ $((files + 1)) -gt 8 ] || [ $((bytes + size)) -gt $((60 * 1024 * 1024)) ]; then echo "later: $f"; continue; fi
  mv "$W/pack/$f" "$out/"
  files=$((files + 1)); bytes=$((bytes + size))
done
echo "--- pipeline log"; tail -n 30 "$W/logs/pipeline.log" 2>/dev/null
echo "--- packed: $(tr '\n' ' ' < "$W/sent.list"); still to send: $(ls "$W/pack" | tr '\n' ' ')"
[ -f "$W/pipeline.done" ] && echo "PIPELINE DONE" || echo "pipeline still running"
ls -la "$out"
