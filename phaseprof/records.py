"""The files a capture writes besides the trace, one typed record per file kind, written and read here only.

- ``run.json`` (one capture, ``RunRecord``): what ran (model, its config.json, engine, device, versions), the
  request, clean timings, the profile and the trace's file facts. ``capture/runner.py`` (single GPU) and
  ``capture/multi_gpu.py`` (one trace per rank, ``parallel`` set) write it; diff, memory and the dashboard read it.
- ``sweep.json`` (one sweep, ``SweepRecord``): the same "what ran" header, then one point per length or
  concurrency with its clean timing statistics.
- the ``phaseprof`` key embedded in ``trace.json.gz``: ``RunRecord.embedded()``, a flat subset of run.json.

Reading accepts run.json files written before this module (multi-GPU runs kept phase, tokens and parallel
settings at the top level): ``RunRecord.from_dict`` maps them onto the same fields. Keys this module does not
know are kept in ``extra`` and written back unchanged.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from phaseprof.errors import PhaseprofError
from phaseprof.io import atomic_write_bytes

RUN_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class ModelInfo:
    """The model as the user named it (``name``: preset or repo id) and what vLLM loaded."""

    name: str | None = None
    kind: str | None = None  # "preset" | "hf" | "path"
    path: str | None = None  # what vllm.LLM(model=...) got
    load_format: str | None = None  # "dummy" = random weights
    architecture: str | None = None  # config.json architectures[0]
    is_hybrid: bool | None = None  # has linear-attention (GDN) layers
    notes: str | None = None
    slug: str | None = None  # names run directories

    @classmethod
    def of_source(cls, src: Any) -> ModelInfo:
        """From a ``capture.models.ModelSource``."""
        return cls(name=src.name, kind=src.kind, path=src.path, load_format=src.load_format,
                   architecture=((src.hf_config or {}).get("architectures") or [None])[0],
                   is_hybrid=src.is_hybrid, notes=src.notes or None, slug=src.slug)


@dataclass(frozen=True)
class RequestInfo:
    """The profiled request. ``max_tokens``: output tokens asked for (1 for prefill)."""

    phase: str | None = None  # "prefill" | "decode"
    prompt_tokens: int | None = None
    max_tokens: int | None = None
    concurrency: int = 1
    seed: int | None = None
    prompt: str = "random token ids, seeded (seed, length)"


@dataclass(frozen=True)
class ParallelInfo:
    """Multi-GPU captures: one trace per rank, written by vLLM's own profiler into ``ranks/``."""

    tensor_parallel_size: int
    expert_parallel: bool
    rank_traces: tuple[str, ...]
    profiler: str = "vLLM profiler_config (torch), one trace per rank"


def _known(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def _sub(cls: type, value: Any, what: str, source: str) -> Any:
    """A nested record from its dict (unknown keys dropped), or None."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise PhaseprofError(f"{what} is {type(value).__name__}, expected an object", path=source or None)
    kw = {k: v for k, v in value.items() if k in _known(cls)}
    if cls is ParallelInfo:
        kw["rank_traces"] = tuple(kw.get("rank_traces") or ())
    return cls(**kw)


def _dict(value: Any, what: str, source: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise PhaseprofError(f"{what} is {type(value).__name__}, expected an object", path=source or None)
    return value


def _plain(obj: Any) -> Any:
    """Dataclasses and tuples as JSON-ready dicts and lists."""
    if dataclasses.is_dataclass(obj):
        return {f.name: _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [_plain(x) for x in obj]
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    return obj


def _write(path: Path, doc: dict[str, Any]) -> Path:
    """Indented, key-sorted JSON, written atomically (as every phaseprof record)."""
    return atomic_write_bytes(path, orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS |
                                                 orjson.OPT_SERIALIZE_NUMPY) + b"\n")


def _read(path: Path, kind: str) -> dict[str, Any]:
    try:
        doc = orjson.loads(Path(path).read_bytes())
    except OSError as e:
        raise PhaseprofError(f"cannot read {kind}: {e.strerror}", path=path) from None
    except orjson.JSONDecodeError as e:
        raise PhaseprofError(f"not valid JSON ({e})", path=path) from None
    if not isinstance(doc, dict):
        raise PhaseprofError(f"not a {kind} (a JSON {type(doc).__name__}, expected an object)", path=path)
    return doc


@dataclass(frozen=True)
class RunRecord:
    """One capture's ``run.json``. Times in ms; ``ttft_ms`` / ``tpot_ms`` are the clean (profiler-off) medians
    of the headline source; ``timing`` holds every statistic (``capture.timing.PhaseTiming.to_dict``)."""

    kind: str = "capture"
    created_utc: str | None = None
    command: list[str] = field(default_factory=list)
    mode: str | None = None  # "eager" | "graph"
    quant: str | None = None
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    versions: dict[str, Any] = field(default_factory=dict)
    device: dict[str, Any] = field(default_factory=dict)  # capture.device.DeviceInfo.to_dict()
    model: ModelInfo = field(default_factory=ModelInfo)
    model_config: dict[str, Any] | None = None  # the model's config.json content (None when not readable)
    engine: dict[str, Any] = field(default_factory=dict)  # kwargs, env, notes, startup_s
    vllm_startup_facts: dict[str, Any] | None = None  # vllm_log.StartupFacts.to_dict()
    request: RequestInfo = field(default_factory=RequestInfo)
    headline: dict[str, Any] | None = None  # metric, median_ms, p10_ms, p90_ms, source
    timing: dict[str, Any] = field(default_factory=dict)
    profile: dict[str, Any] | None = None  # profiled steps, host_ms, overhead_ratio, ...
    trace: dict[str, Any] | None = None  # capture.profile.TraceFile.to_dict()
    breakdown: str | None = None  # "breakdown.json" when the analysis succeeded
    breakdown_error: str | None = None
    parallel: ParallelInfo | None = None  # multi-GPU captures only
    schema_version: int = RUN_SCHEMA_VERSION
    extra: dict[str, Any] = field(default_factory=dict)  # keys this version does not know, kept as read

    def to_dict(self) -> dict[str, Any]:
        doc = _plain(self)
        extra = doc.pop("extra")
        if doc["parallel"] is None:
            del doc["parallel"]
        return {**extra, **doc}

    def embedded(self, overhead_ratio: float | None = None) -> dict[str, Any]:
        """The flat subset embedded in the trace itself (its top-level ``phaseprof`` key); ``overhead_ratio``
        unrounded (run.json keeps it to 4 digits)."""
        gpu = self.device.get("name") if self.device.get("kind") == "cuda" else None
        return {
            "schema_version": self.schema_version, "model": self.model.name, "phase": self.request.phase,
            "prompt_tokens": self.request.prompt_tokens, "max_tokens": self.request.max_tokens,
            "concurrency": self.request.concurrency, "mode": self.mode, "quant": self.quant,
            "device": self.device.get("kind"), "gpu_name": gpu, "vllm_version": self.versions.get("vllm"),
            "torch_version": self.versions.get("torch"), "headline": self.headline, "ttft_ms": self.ttft_ms,
            "tpot_ms": self.tpot_ms, "profiler_overhead_ratio": overhead_ratio,
        }

    @classmethod
    def from_dict(cls, doc: dict[str, Any], *, source: str = "") -> RunRecord:
        """A record from run.json content (also the pre-record multi-GPU layout). Raises PhaseprofError
        naming ``source`` when a known field has the wrong shape."""
        d = dict(doc)
        model = d.pop("model", None)
        model_info = ModelInfo(name=model) if isinstance(model, str) else _sub(ModelInfo, model, "model", source)
        request = d.pop("request", None)
        if request is None and any(k in d for k in ("phase", "tokens", "output_tokens")):
            request = {"phase": d.pop("phase", None), "prompt_tokens": d.pop("tokens", None),
                       "max_tokens": d.pop("output_tokens", None)}
        parallel = d.pop("parallel", None)
        if parallel is None and "tensor_parallel_size" in d:
            parallel = {"tensor_parallel_size": d.pop("tensor_parallel_size"),
                        "expert_parallel": bool(d.pop("expert_parallel", False)),
                        "rank_traces": d.pop("rank_traces", ()), "profiler": d.pop("profiler", "")}
        engine = dict(_dict(d.pop("engine", None), "engine", source))
        if "startup_s" in d and "startup_s" not in engine:
            engine["startup_s"] = d.pop("startup_s")
        profile = d.pop("profile", None)
        if profile is None and "profiler_overhead" in d:
            profile = {"overhead_ratio": d.pop("profiler_overhead")}
        kw: dict[str, Any] = {k: d.pop(k) for k in list(d) if k in _known(cls) and k != "extra"}
        for name in ("versions", "device", "timing"):
            kw[name] = _dict(kw.get(name), name, source)
        for name in ("vllm_startup_facts", "headline", "trace", "model_config"):
            if kw.get(name) is not None:
                _dict(kw[name], name, source)
        if isinstance(kw.get("command"), str):
            kw["command"] = kw["command"].split()
        return cls(model=model_info or ModelInfo(), request=_sub(RequestInfo, request, "request", source)
                   or RequestInfo(), parallel=_sub(ParallelInfo, parallel, "parallel", source), engine=engine,
                   profile=_dict(profile, "profile", source) if profile is not None else None, extra=d, **kw)

    def write(self, path: str | Path) -> Path:
        return _write(Path(path), self.to_dict())

    @classmethod
    def read(cls, path: str | Path) -> RunRecord:
        return cls.from_dict(_read(Path(path), "run.json"), source=str(path))


@dataclass(frozen=True)
class SweepRecord:
    """One sweep's ``sweep.json``: ``points`` as ``capture.sweep.PrefillPoint`` / ``DecodePoint.to_dict()``
    (times in ms: ``ttft`` / ``tpot`` hold median_ms, p10_ms, p90_ms, ...)."""

    phase: str  # "prefill": TTFT vs prompt_tokens; "decode": TPOT vs concurrency
    kind: str = "sweep"
    created_utc: str | None = None
    command: list[str] = field(default_factory=list)
    versions: dict[str, Any] = field(default_factory=dict)
    device: dict[str, Any] = field(default_factory=dict)
    model: ModelInfo = field(default_factory=ModelInfo)
    model_config: dict[str, Any] | None = None
    engine: dict[str, Any] = field(default_factory=dict)  # kwargs, env, notes, startup_s, mode, quant
    vllm_startup_facts: dict[str, Any] | None = None
    reps: int | None = None
    warmup: int | None = None
    seed: int | None = None
    points: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)  # lengths / concurrencies not run (deadline)
    slope_us_per_token: float | None = None  # prefill: least-squares TTFT slope
    profiles: dict[str, Any] | None = None  # prefill --profile-at: length -> capture directory facts
    plot_files: list[str] = field(default_factory=list)
    elapsed_s: float | None = None
    schema_version: int = RUN_SCHEMA_VERSION
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def x_key(self) -> str:
        """The point field on the x axis."""
        return "concurrency" if self.phase == "decode" else "prompt_tokens"

    @property
    def y_key(self) -> str:
        """The point field holding the timing statistics."""
        return "tpot" if self.phase == "decode" else "ttft"

    def to_dict(self) -> dict[str, Any]:
        doc = _plain(self)
        extra = doc.pop("extra")
        doc[f"skipped_{'concurrency' if self.phase == 'decode' else 'lengths'}"] = doc.pop("skipped")
        if self.phase == "decode":
            del doc["slope_us_per_token"], doc["profiles"]
        return {**extra, **doc}

    @classmethod
    def from_dict(cls, doc: dict[str, Any], *, source: str = "") -> SweepRecord:
        d = dict(doc)
        if d.get("kind") != "sweep" or d.get("phase") not in ("prefill", "decode"):
            raise PhaseprofError("not a phaseprof sweep.json (kind 'sweep', phase prefill|decode)",
                                 path=source or None)
        model = d.pop("model", None)
        skipped = d.pop("skipped_lengths", None) or d.pop("skipped_concurrency", None) or []
        points = d.pop("points", [])
        if not isinstance(points, list) or not all(isinstance(p, dict) for p in points):
            raise PhaseprofError("points is not a list of objects", path=source or None)
        kw = {k: d.pop(k) for k in list(d) if k in _known(cls) and k != "extra"}
        return cls(model=ModelInfo(name=model) if isinstance(model, str) else _sub(ModelInfo, model, "model", source)
                   or ModelInfo(), points=points, skipped=list(skipped), extra=d, **kw)

    def write(self, path: str | Path) -> Path:
        return _write(Path(path), self.to_dict())

    @classmethod
    def read(cls, path: str | Path) -> SweepRecord:
        return cls.from_dict(_read(Path(path), "sweep.json"), source=str(path))
