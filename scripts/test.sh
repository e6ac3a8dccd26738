#!/usr/bin/env bash
# Install everything and run the whole test suite (what CI runs). Extra args go to pytest.
set -uo pipefail
cd "$(dirname "$0")/.."
# The CPU engine unless PHASEPROF_ENGINE says otherwise: CI tests what a CPU machine can (the CUDA engine is
# for captures on a GPU machine; its GPU-only tests skip without CUDA).
PHASEPROF_ENGINE=${PHASEPROF_ENGINE:-cpu} bash scripts/install.sh || exit 1
# Headless Chromium for the dashboard's end-to-end test (Debian package; Playwright drives it via executable_path).
if ! command -v chromium >/dev/null 2>&1; then
  (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) || echo "warning: could not install chromium"
fi
mkdir -p test-artifacts
.venv/bin/python -m pytest -q -rs "$@"
rc=$?
# pytest exit code 5 = no tests collected: treat as a failure of the suite's wiring, never as success.
if [ "$rc" -eq 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi
exit "$rc"
