"""One GPU catalogue, read into one record type, and one way to compare GPU names.

``gpus.toml`` (beside this module) is the catalogue: one ``[[gpu]]`` entry per GPU (``GpuEntry``: its memory
facts, which the memory planner reads, and its datasheet throughput, which the speed of light reads, each with
its source) and the ``[[link]]`` interconnects (``Link``). ``read_catalogue`` is the only reader of the file: it
checks every entry once and returns a ``Catalogue``.

``gpu_key``: the datasheet's ``H100-SXM5-80GB``, a user's ``h100 sxm5 80gb`` and a measured-ceilings file's
``NVIDIA H200`` against a trace's ``NVIDIA H200`` are equal when their keys are; ``Catalogue.gpu`` finds an
entry by its name or an alias that way. A trace's device string (``NVIDIA H100 80GB HBM3``) is no catalogue
name: ``GpuEntry.matches_device`` tries the entry's ``match`` patterns (and its SM count) on it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from phaseprof.errors import PhaseprofError
from phaseprof.toml_checks import check_keys, positive

CATALOGUE_PATH = Path(__file__).with_name("gpus.toml")
_GIB = 1 << 30  # HBM capacities are marketed in binary units

_THROUGHPUT_REQUIRED = frozenset({"match", "bf16_tflops", "hbm_tbps", "source"})
_THROUGHPUT = _THROUGHPUT_REQUIRED | {"fp8_tflops", "fp4_tflops", "sm_count", "examples"}
_MEMORY = frozenset({"vendor", "memory_gb", "compute_capability", "visible_bytes", "visible_source"})
_GPU_KEYS = frozenset({"name", "aliases"}) | _THROUGHPUT | _MEMORY
_LINK_KEYS = frozenset({"name", "gb_per_s", "source"})


def gpu_key(name: str) -> str:
    """``name`` without spaces, dashes and underscores, upper-cased: the key GPU names are compared by."""
    return re.sub(r"[\s_\-]+", "", name).upper()


@dataclass(frozen=True)
class GpuEntry:
    """One ``[[gpu]]`` of the catalogue. Memory facts (None where the catalogue has none): ``memory_gb`` as the
    vendor states it (binary GB), ``compute_capability`` (None for non-CUDA devices: vLLM skips the CUDA-graph
    memory profile, and with it the scratch KV cache, on ROCm), ``visible_bytes`` what ``torch.cuda.mem_get_info``
    reports where someone measured it (``visible_source`` says where). Datasheet throughput (None without):
    dense ``bf16_tflops`` / ``fp8_tflops`` / ``fp4_tflops``, ``hbm_tbps``, ``source``; ``match`` / ``sm_count``
    recognise a trace's device string."""

    name: str
    aliases: tuple[str, ...] = ()
    vendor: str = ""
    memory_gb: int | None = None
    compute_capability: tuple[int, int] | None = None
    visible_bytes: int | None = None
    visible_source: str = ""
    match: tuple[re.Pattern[str], ...] = ()
    sm_count: int | None = None
    bf16_tflops: float | None = None
    fp8_tflops: float | None = None
    fp4_tflops: float | None = None
    hbm_tbps: float | None = None
    source: str = ""

    @property
    def has_throughput(self) -> bool:
        return self.bf16_tflops is not None and self.hbm_tbps is not None

    @property
    def stated_bytes(self) -> int:
        """Memory as the vendor states it, in bytes (0 when the catalogue states none)."""
        return (self.memory_gb or 0) * _GIB

    @property
    def total_bytes(self) -> int:
        """What the memory planner uses as the device total: measured if known, else stated."""
        return self.visible_bytes if self.visible_bytes is not None else self.stated_bytes

    @property
    def is_cuda(self) -> bool:
        return self.compute_capability is not None

    @property
    def is_blackwell_datacenter(self) -> bool:
        """Compute capability 10.x: vLLM 0.28 raises its default max capture size to 1024 there."""
        return self.compute_capability is not None and self.compute_capability[0] == 10

    def matches_device(self, device: str, sm_count: int | None = None) -> bool:
        """A trace's device string is this GPU: a ``match`` pattern is found in it, and the SM count agrees where
        both are known."""
        if not any(p.search(device) for p in self.match):
            return False
        return self.sm_count is None or sm_count is None or sm_count == self.sm_count


@dataclass(frozen=True)
class Link:
    """One direction of a GPU-to-GPU link: ``gb_per_s`` GB/s (1e9 bytes/s) and where the figure comes from."""

    name: str
    gb_per_s: float
    source: str


@dataclass(frozen=True)
class Catalogue:
    """A catalogue file's GPUs (in file order) and links, checked."""

    path: Path
    gpus: tuple[GpuEntry, ...]
    links: tuple[Link, ...]

    def gpu(self, name: str) -> GpuEntry | None:
        """The entry whose name or alias has ``name``'s ``gpu_key``, or None."""
        key = gpu_key(name)
        return next((g for g in self.gpus if key in {gpu_key(n) for n in (g.name, *g.aliases)}), None)


def _strings(v: Any, what: str, fail: Any) -> tuple[str, ...]:
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise fail(f"'{what}' must be a list of strings")
    return tuple(v)


def _gpu(t: Any, where: str, file: Path) -> GpuEntry:
    """One ``[[gpu]]`` table, every fact it states checked; PhaseprofError naming the entry and the file."""
    def fail(problem: str) -> PhaseprofError:
        return PhaseprofError(f"{where}: {problem}", path=file)

    throughput = isinstance(t, dict) and bool(set(t) & _THROUGHPUT)
    required = frozenset({"name"}) | (_THROUGHPUT_REQUIRED if throughput else frozenset())
    check_keys(t, required=required, allowed=_GPU_KEYS, fail=fail)
    if not isinstance(t["name"], str) or not t["name"].strip():
        raise fail("'name' must be a non-empty string")
    fields: dict[str, Any] = {"name": t["name"], "aliases": _strings(t.get("aliases", []), "aliases", fail),
                              "vendor": str(t.get("vendor", ""))}
    if "memory_gb" in t:
        gb, cc, vis = t["memory_gb"], t.get("compute_capability"), t.get("visible_bytes")
        if isinstance(gb, bool) or not isinstance(gb, int) or gb <= 0:
            raise fail(f"'memory_gb' must be a positive integer, not {gb!r}")
        if cc is not None and not (isinstance(cc, list) and len(cc) == 2 and all(type(x) is int for x in cc)):
            raise fail(f"'compute_capability' must be [major, minor], not {cc!r}")
        if vis is not None and (type(vis) is not int or vis <= 0 or not t.get("visible_source")):
            raise fail("'visible_bytes' must be a positive integer, with its 'visible_source'")
        fields |= {"memory_gb": gb, "compute_capability": None if cc is None else (cc[0], cc[1]),
                   "visible_bytes": vis, "visible_source": str(t.get("visible_source", ""))}
    if throughput:
        if not isinstance(t["source"], str) or not t["source"].strip():
            raise fail("'source' must be a non-empty string")
        pats = t["match"]
        if not isinstance(pats, list) or not pats or not all(isinstance(p, str) for p in pats):
            raise fail("'match' must be a non-empty list of regex strings")
        try:
            compiled = tuple(re.compile(p, re.IGNORECASE) for p in pats)
        except re.error as e:
            raise fail(f"bad regex in 'match': {e}") from None
        sm = t.get("sm_count")
        if sm is not None and (isinstance(sm, bool) or not isinstance(sm, int) or sm <= 0):
            raise fail(f"'sm_count' must be a positive integer, not {sm!r}")
        for ex in _strings(t.get("examples", []), "examples", fail):
            if not any(p.search(ex) for p in compiled):
                raise fail(f"example {ex!r} matches none of its 'match' patterns")
        fields |= {"match": compiled, "sm_count": sm, "source": t["source"],
                   "bf16_tflops": positive(t["bf16_tflops"], "bf16_tflops", fail),
                   "hbm_tbps": positive(t["hbm_tbps"], "hbm_tbps", fail),
                   "fp8_tflops": positive(t.get("fp8_tflops"), "fp8_tflops", fail, optional=True),
                   "fp4_tflops": positive(t.get("fp4_tflops"), "fp4_tflops", fail, optional=True)}
    return GpuEntry(**fields)


def _link(t: Any, where: str, file: Path) -> Link:
    def fail(problem: str) -> PhaseprofError:
        return PhaseprofError(f"{where}: {problem}", path=file)

    check_keys(t, required=_LINK_KEYS, allowed=_LINK_KEYS, fail=fail)
    bw = positive(t["gb_per_s"], "gb_per_s", fail)
    if not all(isinstance(t[k], str) and t[k].strip() for k in ("name", "source")):
        raise fail("name and source must be non-empty strings")
    return Link(t["name"], float(bw or 0), t["source"])


def read_catalogue(path: str | Path = CATALOGUE_PATH) -> Catalogue:
    """A catalogue file, every entry checked (kept per file and modification time). A missing file, bad TOML,
    an unknown section, a bad entry or a GPU listed twice → PhaseprofError naming the file (and the entry)."""
    p = Path(path)
    try:
        stat = p.stat()
    except OSError:
        raise PhaseprofError("GPU catalogue not found", path=p) from None
    return _read(str(p.resolve()), stat.st_mtime_ns)


@lru_cache(maxsize=8)
def _read(path: str, _mtime_ns: int) -> Catalogue:
    file = Path(path)
    try:
        data = tomllib.loads(file.read_text())
    except OSError:
        raise PhaseprofError("GPU catalogue not found", path=file) from None
    except tomllib.TOMLDecodeError as e:
        raise PhaseprofError(f"not valid TOML: {e}", path=file) from None
    unknown = sorted(set(data) - {"gpu", "link"})
    if unknown:
        raise PhaseprofError(f"unknown section {unknown[0]!r} (expected [[gpu]] or [[link]])", path=file)
    gpus, links = data.get("gpu", []), data.get("link", [])
    if not isinstance(gpus, list) or not gpus:
        raise PhaseprofError("no [[gpu]] entries", path=file)
    if not isinstance(links, list):
        raise PhaseprofError("[[link]] must be a list of tables", path=file)
    entries = tuple(_gpu(t, f"[[gpu]] #{i}", file) for i, t in enumerate(gpus, 1))
    names = [e.name for e in entries]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise PhaseprofError(f"GPU {dupes[0]!r} is listed twice", path=file)
    return Catalogue(file, entries, tuple(_link(t, f"[[link]] #{i}", file) for i, t in enumerate(links, 1)))


def catalogue() -> Catalogue:
    """The package's catalogue (``gpus.toml``)."""
    return read_catalogue(CATALOGUE_PATH)
