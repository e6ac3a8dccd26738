#!/usr/bin/env bash
# One H200 call of issue 3's GPU session: `bash scripts/gpu/h200_session.sh eager|graph [extra args]`.
# Run from the repository root; writes into $OUT (the device tool's output folder) or ./h200-out.
set -uo pipefail
mode=${1:?usage: h200_session.sh eager|graph [args]}; shift
out=${OUT:-$PWD/h200-out}
[ -f "$HOME/phaseprof-payload/env.sh" ] && . "$HOME/phaseprof-payload/env.sh"
export PYTHONUNBUFFERED=1 VLLM_ENABLE_V1_MULTIPROCESSING=0 HF_HUB_OFFLINE=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# The script's own watchdog ends it at budget + 25 s (default 540 s); this outer limit is the last resort.
timeout -k 5 570 python3 scripts/gpu/h200_session.py --mode "$mode" --out "$out" "$@"
rc=$?
ls -la "$out"
exit $rc
