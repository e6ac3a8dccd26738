"""What a running server is: vLLM or not, its version, model, limits, profiling route and parallel layout.

Checks, each one clear line: nothing answers (Unreachable), ``/version`` missing or not vLLM's shape (not vLLM),
no model served, profiling route absent (names the ``--profiler-config`` flag), request longer than the
server's ``max_model_len``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from phaseprof.capture.server.answers import (
    MAX_MODEL_LEN,
    MAX_PATH_CHARS,
    MAX_TEXT_CHARS,
    BadAnswer,
    EngineModel,
    ParallelLayout,
    optional_flag,
    optional_object,
    optional_text,
    optional_whole,
    parse_json,
    text,
)
from phaseprof.capture.server.client import PROFILER_FLAG, ServerClient, ServerError
from phaseprof.capture.shared.rundir import slugify

PROBE_TIMEOUT_S = 10.0
#: Token ids of the random prompts stay below this when the model's vocabulary size cannot be read (every
#: tokenizer phaseprof targets has more entries; ids < 10 are skipped as likely special tokens).
FALLBACK_VOCAB = 1000
#: Largest vocabulary taken from a config.json (the biggest real ones are ~260k entries).
MAX_VOCAB = 1 << 24
#: Longest model name in a run directory's name.
MAX_SLUG_CHARS = 64
#: Largest config.json read from the served model's directory.
MAX_CONFIG_BYTES = 8 << 20


@dataclass(frozen=True)
class ServerInfo:
    """What the server says about itself, every field checked (``capture/server/answers.py``).

    ``profiling``: True when ``/openapi.json`` lists ``/start_profile``, False when it lists routes but not
    that one, None when the server hides its OpenAPI schema (then ``/start_profile`` itself decides).
    ``parallel`` and ``engine``: vLLM's parallel and model config from ``/server_info`` (only served with
    ``VLLM_SERVER_DEV_MODE=1``). ``hf_config``: the model's config.json when the served ``root`` is a directory
    readable on this machine.
    """

    url: str
    version: str
    model_id: str
    root: str | None
    max_model_len: int | None
    profiling: bool | None
    parallel: ParallelLayout | None
    engine: EngineModel | None
    hf_config: dict[str, Any] | None
    async_scheduling: bool | None = None  # the server's resolved scheduler_config.async_scheduling, when served
    settings: dict[str, Any] | None = None  # engine arguments the memory plan reads (_settings), when served

    @property
    def world_size(self) -> int | None:
        """Ranks that write a trace: tensor x pipeline parallel size (x data parallel), when known."""
        return None if self.parallel is None else self.parallel.world_size

    @property
    def vocab_size(self) -> int | None:
        """The model's vocabulary size from its config.json, when it is a sane whole number."""
        cfg = self.hf_config or {}
        text_cfg = cfg.get("text_config")
        v = cfg.get("vocab_size") or (text_cfg.get("vocab_size") if isinstance(text_cfg, dict) else None)
        try:
            return optional_whole(v, "vocab_size", lo=16, hi=MAX_VOCAB)
        except BadAnswer:
            return None  # a local file's oddity: the prompts fall back to ids below FALLBACK_VOCAB

    @property
    def architecture(self) -> str | None:
        """The first of config.json's ``architectures``, when it is a string."""
        archs = (self.hf_config or {}).get("architectures")
        first = archs[0] if isinstance(archs, list) and archs else None
        return first if isinstance(first, str) and len(first) <= MAX_TEXT_CHARS else None

    @property
    def model_slug(self) -> str:
        """The served model's name for a run directory: file-name safe, at most MAX_SLUG_CHARS (a model id of
        hundreds of characters must not make a name the file system refuses)."""
        return slugify(Path(self.model_id).name)[:MAX_SLUG_CHARS].strip("-.") or "model"

    @property
    def mode(self) -> str | None:
        """``eager`` or ``graph`` when the server's model config is known."""
        eager = None if self.engine is None else self.engine.enforce_eager
        return None if eager is None else ("eager" if eager else "graph")

    @property
    def quant(self) -> str | None:
        """The weights' format as phaseprof names it (``bf16``, ``fp8``, or vLLM's quantization method as
        served), when the server's model config is known: it tells two servers of one model apart."""
        if self.engine is None:
            return None
        if self.engine.quantization:
            return self.engine.quantization
        return {"bfloat16": "bf16", "torch.bfloat16": "bf16"}.get(self.engine.dtype or "", self.engine.dtype)

    def to_dict(self) -> dict[str, Any]:
        return {"url": self.url, "version": self.version, "model": self.model_id, "root": self.root,
                "max_model_len": self.max_model_len, "profiling_route": self.profiling,
                "parallel": None if self.parallel is None else self.parallel.to_dict(),
                "world_size": self.world_size, "mode": self.mode, "quant": self.quant,
                "async_scheduling": self.async_scheduling}


def _local_config(root: str | None) -> dict[str, Any] | None:
    """``root/config.json`` when it is a regular file of at most MAX_CONFIG_BYTES holding a JSON object (the
    path came from the server: a FIFO or a huge file there must not hang or fill memory)."""
    if not root:
        return None
    cfg = Path(root) / "config.json"
    try:
        if not cfg.is_file() or cfg.stat().st_size > MAX_CONFIG_BYTES:
            return None
        with cfg.open("rb") as f:
            doc = parse_json(f.read(MAX_CONFIG_BYTES + 1))
    except OSError:
        return None
    return doc if isinstance(doc, dict) else None


def _probe_timeout(client: ServerClient) -> float:
    """Each probe request's deadline: PROBE_TIMEOUT_S, or the client's own when that is shorter."""
    return min(PROBE_TIMEOUT_S, client.timeout_s)


#: /server_info cache_config fields the memory plan reads, as the ``vllm.LLM`` argument each one is
CACHE_SETTINGS = {"enable_prefix_caching": "enable_prefix_caching", "cache_dtype": "kv_cache_dtype",
                  "mamba_cache_dtype": "mamba_cache_dtype", "mamba_ssm_cache_dtype": "mamba_ssm_cache_dtype"}


def _settings(cache: dict[str, Any] | None, sched: dict[str, Any] | None,
              par: ParallelLayout | None) -> dict[str, Any]:
    """The served engine's arguments the memory plan needs (capacity wall), from ``/server_info``."""
    out: dict[str, Any] = {}
    for key, arg in CACHE_SETTINGS.items():
        value = (cache or {}).get(key)
        if isinstance(value, bool):
            out[arg] = optional_flag(value, f"/server_info cache_config {key}")
        elif value is not None:
            out[arg] = optional_text(value, f"/server_info cache_config {key}")
    seqs = None if sched is None else optional_whole(sched.get("max_num_seqs"), "/server_info max_num_seqs",
                                                     lo=1, hi=1 << 20)
    if seqs is not None:
        out["max_num_seqs"] = seqs
    if par is not None and par.world_size:
        out["tensor_parallel_size"] = par.to_dict().get("tensor_parallel_size") or 1
    return out


def _dev_info(client: ServerClient) -> tuple[ParallelLayout | None, EngineModel | None, bool | None,
                                             dict[str, Any]]:
    """(parallel layout, engine model, async_scheduling, engine settings) from ``/server_info``, None / {} when
    not served."""
    status, doc = client.get_json("/server_info?config_format=json", timeout_s=_probe_timeout(client))
    if status != 200 or not isinstance(doc, dict) or not isinstance(doc.get("vllm_config"), dict):
        return None, None, None, {}
    cfg = doc["vllm_config"]
    par = optional_object(cfg.get("parallel_config"), "/server_info parallel_config")
    model = optional_object(cfg.get("model_config"), "/server_info model_config")
    sched = optional_object(cfg.get("scheduler_config"), "/server_info scheduler_config")
    async_sched = None if sched is None else optional_flag(sched.get("async_scheduling"),
                                                           "/server_info async_scheduling")
    cache = optional_object(cfg.get("cache_config"), "/server_info cache_config")
    layout = None if par is None else ParallelLayout.of(par)
    settings = _settings(cache, sched, layout)
    kv = optional_object(cfg.get("kv_transfer_config"), "/server_info kv_transfer_config")
    connector = None if kv is None else optional_text(kv.get("kv_connector"), "/server_info kv_connector", limit=64)
    if connector:  # a disaggregated (PD) capture names the KV connector both servers run
        settings["kv_connector"] = connector
    return layout, (None if model is None else EngineModel.of(model)), async_sched, settings


def probe(client: ServerClient) -> ServerInfo:
    """Ask the server what it is; raise one clear error when it is not a vLLM server serving a model, or when a
    field it sends is not what vLLM sends."""
    url = client.endpoint.url
    try:
        return _probe(client, url)
    except BadAnswer as e:
        raise BadAnswer(f"{url} is no usable vLLM server: {e}") from None


def _probe(client: ServerClient, url: str) -> ServerInfo:
    status, doc = client.get_json("/version", timeout_s=_probe_timeout(client))
    if status != 200 or not isinstance(doc, dict) or not isinstance(doc.get("version"), str):
        raise ServerError(f"{url} answered but is not a vLLM server (GET /version: HTTP {status}"
                          f"{'' if status != 200 else ', no version field'})")
    version = text(doc["version"], "GET /version version", limit=64)
    status, models = client.get_json("/v1/models", timeout_s=_probe_timeout(client))
    data = models.get("data") if isinstance(models, dict) else None
    if status != 200 or not isinstance(data, list) or not data or not isinstance(data[0], dict):
        raise ServerError(f"{url} is vLLM {version} but GET /v1/models lists no model (HTTP {status})")
    m = data[0]
    model_id = text(m.get("id"), "GET /v1/models id")
    root = optional_text(m.get("root"), "GET /v1/models root", limit=MAX_PATH_CHARS)
    listed_len = optional_whole(m.get("max_model_len"), "GET /v1/models max_model_len", lo=1, hi=MAX_MODEL_LEN)
    status, schema = client.get_json("/openapi.json", timeout_s=_probe_timeout(client))
    paths = schema.get("paths") if status == 200 and isinstance(schema, dict) else None
    profiling = ("/start_profile" in paths) if isinstance(paths, dict) else None
    parallel, engine, async_sched, settings = _dev_info(client)
    max_len = listed_len or (None if engine is None else engine.max_model_len)
    return ServerInfo(url=url, version=version, model_id=model_id, root=root, max_model_len=max_len,
                      profiling=profiling, parallel=parallel, engine=engine, hf_config=_local_config(root),
                      async_scheduling=async_sched, settings=settings)


def profiling_disabled(url: str) -> ServerError:
    return ServerError(f"profiling is not enabled on {url}: start the server with {PROFILER_FLAG}")


def check_profiling(info: ServerInfo) -> None:
    if info.profiling is False:
        raise profiling_disabled(info.url)


def check_length(info: ServerInfo, *, prompt_tokens: int, output_tokens: int) -> None:
    """Refuse, before sending anything, a request the server would reject as too long."""
    need = prompt_tokens + output_tokens
    if info.max_model_len is not None and need > info.max_model_len:
        raise ServerError(f"{prompt_tokens} prompt + {output_tokens} output tokens = {need} exceeds the server's "
                          f"max_model_len ({info.max_model_len}); use fewer --tokens or restart the server with "
                          "a larger --max-model-len")
