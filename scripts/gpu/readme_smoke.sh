#!/usr/bin/env bash
# The README's main command on whatever GPU this machine has, as a new user runs it: every default, no option
# added. Then `phaseprof capture --phase decode` with defaults, then `phaseprof analyze` of both run directories,
# then checks (scripts/gpu/readme_smoke_check.py): exit 0, the timing fields (serving-default and profiled
# engine), graph-mode module+layer coverage; one summary line per run. Exit 0 only when every check holds.
#
#   bash scripts/gpu/readme_smoke.sh [OUT_DIR]       (OUT_DIR default: $OUT or ./readme-smoke; the commands
#                                                     run in the current directory, so the runs land in its
#                                                     ./runs, as the README's command writes them)
#
# The install half of the README's command (scripts/install.sh) needs a package index; on the device machines,
# which have none, vLLM comes from the GPU payload (~/phaseprof-payload/env.sh) and this only runs the capture.
# Run every change to capture/, pareto/, disagg/ or the engine set-up through it before calling it done.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-${OUT:-$PWD/readme-smoke}}
mkdir -p "$out"
[ -f "$HOME/phaseprof-payload/env.sh" ] && . "$HOME/phaseprof-payload/env.sh"
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 COLUMNS=80
if ! command -v phaseprof >/dev/null 2>&1; then
  phaseprof() { python3 -c 'import sys; from phaseprof.commands.main import entry; sys.argv[0] = "phaseprof"; sys.exit(entry())' "$@"; }
fi
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv,noheader | tee "$out/gpu.txt"

run() {  # name, then the command's arguments: output (80 columns, a pipe) to $out/NAME.txt, rc to $out/NAME.rc
  local name=$1; shift
  local t0=$SECONDS
  echo "== $name: phaseprof $*"
  phaseprof "$@" >"$out/$name.txt" 2>&1
  local rc=$?
  echo "$rc $((SECONDS - t0))" >"$out/$name.rc"
  echo "== $name: exit $rc after $((SECONDS - t0)) s"
  tail -n 4 "$out/$name.txt"
}

# SMOKE_PHASES=prefill runs the README's main command alone (when device time is short); the summary says so.
phases=${SMOKE_PHASES:-prefill decode}
prefill_dir=skipped decode_dir=skipped
if [[ " $phases " == *" prefill "* ]]; then
  before=$(ls -d runs/*/ 2>/dev/null | sort)
  run prefill capture --phase prefill --tokens 4096
  prefill_dir=$(comm -13 <(echo "$before") <(ls -d runs/*/ 2>/dev/null | sort) | tail -n 1)
fi
if [[ " $phases " == *" decode "* ]]; then
  before=$(ls -d runs/*/ 2>/dev/null | sort)
  run decode capture --phase decode
  decode_dir=$(comm -13 <(echo "$before") <(ls -d runs/*/ 2>/dev/null | sort) | tail -n 1)
fi
for d in prefill decode; do
  dir=${d}_dir; dir=${!dir}
  [ -n "$dir" ] && [ "$dir" != skipped ] && run "analyze-$d" analyze "$dir"
done
python3 "$root/scripts/gpu/readme_smoke_check.py" --out "$out" --prefill "${prefill_dir:-none}" \
  --decode "${decode_dir:-none}" | tee "$out/summary.txt"
exit "${PIPESTATUS[0]}"
