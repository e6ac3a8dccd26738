"""Measured GPU ceilings: what this GPU really reaches on a large GEMM and on HBM traffic.

    python -m phaseprof.sol.measure --out h200-measured.json      # about 30 s on an H200
    python -m phaseprof.sol.measure --quick                       # small sizes, a few seconds

Every figure is the median of ``reps`` timed repetitions (CUDA events around each one, after warm-up
repetitions), so it is a sustained rate on random data, not a datasheet peak:

- ``bf16_dense_tflops``: 2·M·N·K / time of ``torch.matmul`` on BF16 operands (random normal), best of the shapes.
- ``fp8_dense_tflops``: the same through ``torch._scaled_mm`` on float8_e4m3fn operands with per-tensor scales
  and BF16 output; None when this GPU or torch build has no FP8 GEMM.
- ``hbm_copy_tbps``: (bytes read + bytes written) / time of one device-to-device ``copy_`` of a buffer far
  larger than L2.
- ``hbm_read_tbps``: bytes read / time of a ``sum`` over a large FP32 buffer (reduction output is 4 bytes).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
GEMM_SHAPES = ((8192, 8192, 8192), (4096, 16384, 4096))  # (M, N, K): square, and a wide FFN-like shape
QUICK_GEMM_SHAPES = ((2048, 2048, 2048),)
HBM_BYTES = 4 << 30  # 4 GiB per buffer: ~80x the H200's L2, so every byte comes from HBM
QUICK_HBM_BYTES = 256 << 20


def _time_ms(fn: Callable[[], Any], *, warmup: int, reps: int) -> list[float]:
    """Milliseconds of each of ``reps`` calls of ``fn``, timed with CUDA events after ``warmup`` calls."""
    import torch  # noqa: PLC0415 - torch only when measuring

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return times


def _gemm_tflops(shapes: tuple[tuple[int, int, int], ...], *, fp8: bool, device: str, warmup: int,
                 reps: int) -> tuple[float, dict[str, float]]:
    """Best median TFLOP/s over ``shapes`` and the median per shape (key ``MxNxK``)."""
    import torch  # noqa: PLC0415

    per_shape: dict[str, float] = {}
    gen = torch.Generator(device=device).manual_seed(0)
    for m, n, k in shapes:
        a = torch.randn(m, k, device=device, dtype=torch.bfloat16, generator=gen)
        b = torch.randn(n, k, device=device, dtype=torch.bfloat16, generator=gen)
        if fp8:
            a8 = a.to(torch.float8_e4m3fn)
            b8 = b.to(torch.float8_e4m3fn).t()  # _scaled_mm wants the second operand column-major
            one = torch.ones((), device=device, dtype=torch.float32)

            def fn(a8: Any = a8, b8: Any = b8, one: Any = one) -> Any:
                return torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        else:
            bt = b.t()

            def fn(a: Any = a, bt: Any = bt) -> Any:
                return torch.matmul(a, bt)
        ms = statistics.median(_time_ms(fn, warmup=warmup, reps=reps))
        per_shape[f"{m}x{n}x{k}"] = round(2.0 * m * n * k / (ms * 1e-3) / 1e12, 1)
        del a, b
        torch.cuda.empty_cache()
    return max(per_shape.values()), per_shape


def _fp8_supported(device: str) -> str | None:
    """None when FP8 GEMM can run here, else the reason it cannot."""
    import torch  # noqa: PLC0415

    if not hasattr(torch, "float8_e4m3fn") or not hasattr(torch, "_scaled_mm"):
        return "this torch has no float8_e4m3fn / _scaled_mm"
    major, minor = torch.cuda.get_device_capability(device)
    if (major, minor) < (8, 9):
        return f"compute capability {major}.{minor} < 8.9 has no FP8 tensor cores"
    return None


def _hbm(n_bytes: int, *, device: str, warmup: int, reps: int) -> tuple[float, float]:
    """(copy TB/s counting read + write, read-only TB/s of an FP32 sum), medians."""
    import torch  # noqa: PLC0415

    src = torch.empty(n_bytes // 4, device=device, dtype=torch.float32).uniform_()
    dst = torch.empty_like(src)
    copy_ms = statistics.median(_time_ms(lambda: dst.copy_(src), warmup=warmup, reps=reps))
    del dst
    read_ms = statistics.median(_time_ms(lambda: src.sum(), warmup=warmup, reps=reps))
    real_bytes = src.numel() * 4
    del src
    torch.cuda.empty_cache()
    return 2 * real_bytes / (copy_ms * 1e-3) / 1e12, real_bytes / (read_ms * 1e-3) / 1e12


def measure_ceilings(*, device: str = "cuda", quick: bool = False) -> dict[str, Any]:
    """Measure this GPU's dense BF16/FP8 GEMM rates and HBM bandwidth; the JSON document (schema_version 1).

    Raises RuntimeError when CUDA is not available. ``quick`` uses small sizes and few repetitions (a smoke test,
    not a ceiling).
    """
    import torch  # noqa: PLC0415

    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA GPU available (torch.cuda.is_available() is False)")
    dev = torch.device(device)
    if dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    torch.cuda.set_device(dev)
    props = torch.cuda.get_device_properties(dev)
    shapes = QUICK_GEMM_SHAPES if quick else GEMM_SHAPES
    warmup, reps = (2, 5) if quick else (5, 20)
    hbm_bytes = QUICK_HBM_BYTES if quick else HBM_BYTES

    bf16, bf16_shapes = _gemm_tflops(shapes, fp8=False, device=str(dev), warmup=warmup, reps=reps)
    fp8_reason = _fp8_supported(str(dev))
    fp8: float | None = None
    fp8_shapes: dict[str, float] = {}
    if fp8_reason is None:
        try:
            fp8, fp8_shapes = _gemm_tflops(shapes, fp8=True, device=str(dev), warmup=warmup, reps=reps)
        except (RuntimeError, TypeError) as e:  # a torch build without FP8 GEMM kernels for this GPU
            fp8_reason = f"torch._scaled_mm failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
    copy_tbps, read_tbps = _hbm(hbm_bytes, device=str(dev), warmup=warmup, reps=reps)
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "measured",
        "gpu_name": props.name,
        "sm_count": int(props.multi_processor_count),
        "torch": torch.__version__,
        "cuda": str(torch.version.cuda),
        "measured_at": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "bf16_dense_tflops": round(bf16, 1),
        "fp8_dense_tflops": None if fp8 is None else round(fp8, 1),
        "hbm_copy_tbps": round(copy_tbps, 3),
        "hbm_read_tbps": round(read_tbps, 3),
        "method": {
            "timing": f"CUDA events around each call; {warmup} warm-up calls, then the median of {reps}",
            "quick": quick,
            "gemm_shapes_mnk": [list(s) for s in shapes],
            "gemm_flops": "2*M*N*K per call; operands random normal; figure = best shape's median",
            "bf16": "torch.matmul, bfloat16 in and out (fp32 accumulate)",
            "bf16_tflops_per_shape": bf16_shapes,
            "fp8": ("torch._scaled_mm, float8_e4m3fn operands (B column-major), per-tensor scales 1.0, "
                    "bfloat16 out"),
            "fp8_tflops_per_shape": fp8_shapes,
            "fp8_unavailable": fp8_reason,
            "hbm_buffer_bytes": hbm_bytes,
            "hbm_copy": "dst.copy_(src) of one float32 buffer; bytes counted = read + write = 2 x buffer",
            "hbm_read": "src.sum() over one float32 buffer; bytes counted = buffer read once",
            "memory_total_bytes": int(props.total_memory),
            "compute_capability": f"{props.major}.{props.minor}",
        },
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m phaseprof.sol.measure",
                                 description="Measure this GPU's GEMM and HBM ceilings; print/write JSON.")
    ap.add_argument("--out", type=Path, help="write the JSON here (atomically) as well as printing it")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--quick", action="store_true", help="small sizes: a smoke test, not a ceiling")
    args = ap.parse_args(argv)
    try:
        doc = measure_ceilings(device=args.device, quick=args.quick)
    except RuntimeError as e:
        print(f"phaseprof ceilings: {e}", file=sys.stderr)
        return 3
    text = json.dumps(doc, indent=2) + "\n"
    if args.out is not None:
        from phaseprof.io import atomic_write_text  # noqa: PLC0415

        atomic_write_text(args.out, text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
