"""GPU ceilings: what a GPU can do at most, from its datasheet (the GPU catalogue ``phaseprof/gpus.toml``, read by
``gpu_names.read_catalogue``: its entries with throughput) or measured on it
(``phaseprof ceilings`` → a JSON file). Loading validates like the classification rules: a bad file fails
with one line naming the file and the entry."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import orjson

from phaseprof.errors import PhaseprofError
from phaseprof.gpu_names import CATALOGUE_PATH, GpuEntry, gpu_key, read_catalogue
from phaseprof.io import read_regular
from phaseprof.toml_checks import positive

SPEC_PATH = CATALOGUE_PATH
PRECISIONS = ("bf16", "fp8", "fp4")
MEASURED_SCHEMA_VERSION = 1
_MEASURED_REQUIRED = ("gpu_name", "bf16_dense_tflops", "hbm_copy_tbps", "method")


@dataclass(frozen=True)
class Ceiling:
    """Peak dense tensor-core TFLOP/s per precision and HBM TB/s of one GPU. ``kind``: "spec" (datasheet)
    or "measured" (``phaseprof ceilings`` on that GPU); ``source`` says where the figures come from."""

    gpu: str
    kind: str
    bf16_tflops: float
    hbm_tbps: float
    source: str
    fp8_tflops: float | None = None
    fp4_tflops: float | None = None

    def tflops(self, precision: str) -> float:
        """Peak for ``precision``; a GPU without that format falls back to BF16 (what the GEMM would run at)."""
        value = {"bf16": self.bf16_tflops, "fp8": self.fp8_tflops, "fp4": self.fp4_tflops}.get(precision)
        return value if value else self.bf16_tflops

    def ridge(self, precision: str) -> float:
        """Arithmetic intensity (FLOP/byte) above which work is compute-bound on this GPU."""
        return self.tflops(precision) / self.hbm_tbps

    @property
    def label(self) -> str:
        return f"{self.gpu} ({self.kind})"


def spec_ceiling(entry: GpuEntry) -> Ceiling:
    """A catalogue entry's datasheet ceiling (an entry with throughput: ``load_spec``)."""
    assert entry.bf16_tflops is not None and entry.hbm_tbps is not None, entry.name  # load_spec keeps only these
    return Ceiling(gpu=entry.name, kind="spec", bf16_tflops=entry.bf16_tflops, hbm_tbps=entry.hbm_tbps,
                   source=entry.source, fp8_tflops=entry.fp8_tflops, fp4_tflops=entry.fp4_tflops)


def load_spec(path: str | Path = SPEC_PATH) -> tuple[GpuEntry, ...]:
    """The catalogue's GPUs with datasheet throughput, in match order (``gpu_names.read_catalogue`` checks the
    file). None of them → PhaseprofError naming the file."""
    cat = read_catalogue(path)
    entries = tuple(g for g in cat.gpus if g.has_throughput)
    if not entries:
        raise PhaseprofError("no [[gpu]] entry with throughput", path=cat.path)
    return entries


def sm_count_of(props: Mapping[str, Any] | None) -> int | None:
    """SM (CUDA) / CU (ROCm) count as Kineto records it in ``deviceProperties`` (``numSms``)."""
    v = (props or {}).get("numSms")
    return int(v) if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def spec_for(gpu_name: str | None, props: Mapping[str, Any] | None = None, *,
             path: str | Path = SPEC_PATH) -> Ceiling | None:
    """The datasheet ceiling of the trace's GPU, or None when no entry matches (unknown or ambiguous GPU)."""
    if not gpu_name:
        return None
    sms = sm_count_of(props)
    return next((spec_ceiling(e) for e in load_spec(path) if e.matches_device(gpu_name, sms)), None)


def spec_by_name(name: str, *, path: str | Path = SPEC_PATH) -> Ceiling:
    """A datasheet ceiling by catalogue name or alias (``B200``, ``H100-SXM5-80GB``: ``gpu_key``), else by a
    device name that matches an entry (``NVIDIA H200``)."""
    entries = load_spec(path)
    named = read_catalogue(path).gpu(name)
    if named is not None and named.has_throughput:
        return spec_ceiling(named)
    if named is None and (hit := next((e for e in entries if e.matches_device(name)), None)) is not None:
        return spec_ceiling(hit)
    why = f"the catalogue's {named.name} has no datasheet throughput" if named is not None else "unknown GPU"
    raise PhaseprofError(f"no ceilings for GPU {name!r} ({why}); known: {', '.join(e.name for e in entries)}")


# ------------------------------------------------------------------------------------------ measured
def validate_measured(doc: Any, *, path: str | Path | None = None) -> dict[str, Any]:
    """Check a ``phaseprof ceilings`` result (``measure_ceilings`` output); return it unchanged."""
    def fail(problem: str) -> PhaseprofError:
        return PhaseprofError(f"not a measured-ceilings file: {problem}", path=path)

    if not isinstance(doc, dict):
        raise fail("top level must be a JSON object")
    if doc.get("schema_version") != MEASURED_SCHEMA_VERSION:
        raise fail(f"schema_version must be {MEASURED_SCHEMA_VERSION}, not {doc.get('schema_version')!r}")
    if doc.get("kind") != "measured":
        raise fail(f"kind must be 'measured', not {doc.get('kind')!r}")
    missing = [k for k in _MEASURED_REQUIRED if k not in doc]
    if missing:
        raise fail(f"missing {', '.join(missing)}")
    if not isinstance(doc["gpu_name"], str) or not doc["gpu_name"]:
        raise fail("gpu_name must be a non-empty string")
    if not isinstance(doc["method"], dict):
        raise fail("method must be an object")
    for key, optional in (("bf16_dense_tflops", False), ("hbm_copy_tbps", False), ("fp8_dense_tflops", True),
                          ("hbm_read_tbps", True)):
        positive(doc.get(key), key, fail, optional=optional)
    return doc


#: A measured ceilings file is a few hundred bytes; far bigger is none.
MAX_MEASURED_BYTES = 1 << 20


def load_measured(path: str | Path) -> dict[str, Any]:
    """A measured ceilings file (``phaseprof ceilings --out``), read as a regular file of at most
    ``MAX_MEASURED_BYTES`` (a FIFO or /dev/zero is one line) and checked (:func:`validate_measured`)."""
    p = Path(path)
    try:
        doc = orjson.loads(read_regular(p, what="a measured ceilings JSON", max_bytes=MAX_MEASURED_BYTES))
    except orjson.JSONDecodeError as e:
        raise PhaseprofError(f"not valid JSON ({e})", path=p) from None
    return validate_measured(doc, path=p)


def measured_ceiling(doc: Mapping[str, Any], *, source: str = "") -> Ceiling:
    """A measured result as a Ceiling. Bandwidth: the larger of the copy and read figures (both are
    achieved HBM throughput; the ceiling is the most the GPU was seen to move)."""
    bw = max(float(doc["hbm_copy_tbps"]), float(doc.get("hbm_read_tbps") or 0.0))
    fp8 = doc.get("fp8_dense_tflops")
    return Ceiling(gpu=str(doc["gpu_name"]), kind="measured", bf16_tflops=float(doc["bf16_dense_tflops"]),
                   hbm_tbps=bw, fp8_tflops=float(fp8) if fp8 else None,
                   source=source or f"phaseprof ceilings, measured {doc.get('measured_at', '?')}")


def ceiling_for(gpu_name: str | None, props: Mapping[str, Any] | None = None, *,
                measured: str | Path | None = None) -> tuple[Ceiling | None, str | None]:
    """The ceiling a breakdown uses: the measured file when given (a GPU-name mismatch is reported), else
    the datasheet entry. Returns (ceiling, warning)."""
    if measured is not None:
        doc = load_measured(measured)
        c = measured_ceiling(doc, source=f"measured: {_shown(measured)} ({doc.get('measured_at', '?')})")
        warn = None
        if gpu_name and gpu_key(gpu_name) != gpu_key(c.gpu):
            warn = f"ceilings measured on {c.gpu!r}, trace ran on {gpu_name!r}"
        return c, warn
    return spec_for(gpu_name, props), None


#: Measured ceilings that ship with phaseprof, one JSON per GPU (``phaseprof ceilings`` output, chosen by the
#: file's ``gpu_name``): the speed of light of a GPU listed here is the same wherever a run of it sits.
PACKAGED_DIR = Path(__file__).with_name("measured")
#: ``--ceilings spec``: the datasheet figures even where a measured file exists.
SPEC = "spec"


def packaged_measured(gpu_name: str | None) -> Path | None:
    """The measured-ceilings file shipped with phaseprof for ``gpu_name`` (same ``gpu_key``), or None."""
    directory = PACKAGED_DIR
    if not gpu_name or not directory.is_dir():
        return None
    for f in sorted(directory.glob("*.json")):
        if gpu_key(load_measured(f)["gpu_name"]) == gpu_key(gpu_name):  # a bad shipped file is a bug: raise
            return f
    return None


def choose_ceiling(gpu_name: str | None, props: Mapping[str, Any] | None = None, *,
                   ceilings: str | Path | None = None, near: Path | None = None
                   ) -> tuple[Ceiling | None, str | None]:
    """The one speed-of-light baseline of a GPU, in this order: ``ceilings`` when given (a measured file, or
    ``SPEC`` for the datasheet); the measured file shipped with phaseprof for this GPU (``packaged_measured``);
    ``near`` (a measured file found beside the run, for a GPU phaseprof ships none of); the datasheet entry.
    Returns (ceiling or None when the GPU is unknown, warning). The ceiling's ``kind`` and ``source`` name it."""
    if ceilings is not None and str(ceilings) == SPEC:
        return spec_for(gpu_name, props), None
    chosen = ceilings if ceilings is not None else packaged_measured(gpu_name) or near
    return ceiling_for(gpu_name, props, measured=chosen)


def _shown(path: str | Path) -> str:
    """A file shipped with phaseprof as ``phaseprof/…``; else the path relative to the working directory when it
    lies below it (short, and stable in reports)."""
    p = Path(path)
    if p.resolve().parent == PACKAGED_DIR.resolve():
        return f"phaseprof/sol/measured/{p.name}"
    try:
        return str(p.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(p)
