"""``phaseprof ceilings``: measure what this GPU reaches (large BF16/FP8 GEMMs, HBM copy/read), or show the
datasheet ceilings beside measured ones (``--show``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import typer
from rich import box
from rich.console import Console
from rich.table import Table

from phaseprof.errors import EnvironmentProblem, PhaseprofError
from phaseprof.io import atomic_write_bytes
from phaseprof.safe_text import terminal
from phaseprof.sol.ceilings import (Ceiling, load_measured, load_spec, measured_ceiling, spec_by_name, spec_ceiling,
                                     validate_measured)


def _num(v: float | None, fmt: str = ",.0f") -> str:
    return "-" if not v else format(v, fmt)


def ceilings_table(rows: list[Ceiling], title: str) -> Table:
    """Spec and measured ceilings side by side; a measured row follows the spec row of its GPU with the
    ratio measured / spec."""
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("GPU", "kind", "BF16", "FP8", "FP4", "HBM TB/s", "ridge"):
        t.add_column(col, justify="left" if col in ("GPU", "kind") else "right", no_wrap=True)
    spec: dict[str, Ceiling] = {}
    for c in rows:
        t.add_row(terminal(c.gpu), terminal(c.kind), _num(c.bf16_tflops), _num(c.fp8_tflops), _num(c.fp4_tflops),
                  _num(c.hbm_tbps, ".2f"), f"{c.ridge('bf16'):.0f}")
        if c.kind == "spec":
            spec[c.gpu] = c
        elif (s := _spec_of(c)) is not None:
            t.add_row("", "% of spec", f"{100 * c.bf16_tflops / s.bf16_tflops:.0f}",
                      f"{100 * c.fp8_tflops / s.fp8_tflops:.0f}" if c.fp8_tflops and s.fp8_tflops else "-", "-",
                      f"{100 * c.hbm_tbps / s.hbm_tbps:.0f}", "")
    t.caption = "dense tensor-core TFLOP/s (no sparsity); ridge = BF16 FLOP per HBM byte"
    return t


def _spec_of(c: Ceiling) -> Ceiling | None:
    try:
        return spec_by_name(c.gpu)
    except PhaseprofError:
        return None


def _measure(device: str, quick: bool) -> dict[str, Any]:
    try:
        import torch
    except ImportError:
        raise EnvironmentProblem("phaseprof ceilings needs torch with CUDA (pip install 'phaseprof[capture]')") \
            from None
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise EnvironmentProblem("no CUDA device here: phaseprof ceilings measures the GPU it runs on "
                                 "(use --show to print the datasheet ceilings)")
    try:
        from phaseprof.sol.measure import measure_ceilings
    except ImportError as e:
        raise EnvironmentProblem(f"the ceilings micro-benchmark is not installed ({e})") from None
    try:
        doc = measure_ceilings(device=device, quick=quick)
    except RuntimeError as e:  # no usable GPU, out of memory: a fact about this machine
        raise EnvironmentProblem(f"measuring failed: {str(e).splitlines()[0] if str(e) else type(e).__name__}") \
            from None
    return validate_measured(doc)


def ceilings(
    gpu: str | None = typer.Argument(None, help="With --show: only this GPU (B200, H200, or a device name)."),
    show: bool = typer.Option(False, "--show", help="Print datasheet ceilings (and --measured files) side by "
                              "side instead of measuring."),
    measured: list[Path] = typer.Option([], "--measured", help="Measured ceilings JSON to show beside the "
                                        "datasheet figures. Repeatable."),
    out: Path | None = typer.Option(None, "--out", help="Write the measured ceilings JSON here."),
    quick: bool = typer.Option(False, "--quick", help="Fewer and smaller repetitions (a rough figure, fast)."),
    device: str = typer.Option("cuda", "--device", help="torch device to measure."),
) -> None:
    """What the GPU can do: measure its BF16/FP8 GEMM and HBM throughput, or show datasheet figures."""
    console = Console()
    if show:
        mine = [measured_ceiling(load_measured(p), source=str(p)) for p in measured]
        if gpu:
            wanted = spec_by_name(gpu)
            rows = [wanted] + [m for m in mine if (_spec_of(m) or m).gpu == wanted.gpu]
        else:
            rows = []
            for e in load_spec():
                rows.append(spec_ceiling(e))
                rows += [m for m in mine if (s := _spec_of(m)) is not None and s.gpu == e.name]
            rows += [m for m in mine if _spec_of(m) is None]
        console.print(ceilings_table(rows, "GPU ceilings"))
        for c in rows if gpu else []:
            console.print(f"[dim]{terminal(c.kind)} source: {terminal(c.source)}[/]")
        return
    if measured or gpu:
        raise PhaseprofError("GPU and --measured go with --show; to measure, run `phaseprof ceilings --out FILE`")
    with console.status("measuring GEMM and HBM throughput ...", spinner="dots"):
        doc = _measure(device, quick)
    if out is not None:
        atomic_write_bytes(out, orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")
        console.print(f"[dim]wrote {terminal(str(out))}[/]")
    got = measured_ceiling(doc)
    rows = [r for r in (_spec_of(got),) if r is not None] + [got]
    console.print(ceilings_table(rows, f"ceilings of {terminal(str(doc['gpu_name']))}"))


def register(app: typer.Typer) -> None:
    app.command("ceilings")(ceilings)
