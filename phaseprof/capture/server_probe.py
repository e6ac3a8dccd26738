"""What a running server is: vLLM or not, its version, model, limits, profiling route and parallel layout.

Checks, each one clear line: nothing answers (Unreachable), ``/version`` missing or not vLLM's shape (not vLLM),
no model served, profiling route absent (names the ``--profiler-config`` flag), request longer than the
server's ``max_model_len``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from phaseprof.capture.server_client import PROFILER_FLAG, ServerClient, ServerError

PROBE_TIMEOUT_S = 10.0
#: Token ids of the random prompts stay below this when the model's vocabulary size cannot be read (every
#: tokenizer phaseprof targets has more entries; ids < 10 are skipped as likely special tokens).
FALLBACK_VOCAB = 1000


@dataclass(frozen=True)
class ServerInfo:
    """What the server says about itself.

    ``profiling``: True when ``/openapi.json`` lists ``/start_profile``, False when it lists routes but not
    that one, None when the server hides its OpenAPI schema (then ``/start_profile`` itself decides).
    ``parallel``: vLLM's parallel config from ``/server_info`` (only served with ``VLLM_SERVER_DEV_MODE=1``).
    ``hf_config``: the model's config.json when the served ``root`` is a directory readable on this machine.
    """

    url: str
    version: str
    model_id: str
    root: str | None
    max_model_len: int | None
    profiling: bool | None
    parallel: dict[str, Any] | None
    model_config: dict[str, Any] | None
    hf_config: dict[str, Any] | None

    @property
    def world_size(self) -> int | None:
        """Ranks that write a trace: tensor x pipeline parallel size (x data parallel), when known."""
        p = self.parallel or {}
        if not p:
            return None
        size = 1
        for key in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"):
            size *= int(p.get(key) or 1)
        return size

    @property
    def vocab_size(self) -> int | None:
        cfg = self.hf_config or {}
        v = cfg.get("vocab_size") or (cfg.get("text_config") or {}).get("vocab_size")
        return int(v) if v else None

    @property
    def mode(self) -> str | None:
        """``eager`` or ``graph`` when the server's model config is known."""
        eager = (self.model_config or {}).get("enforce_eager")
        return None if eager is None else ("eager" if eager else "graph")

    def to_dict(self) -> dict[str, Any]:
        return {"url": self.url, "version": self.version, "model": self.model_id, "root": self.root,
                "max_model_len": self.max_model_len, "profiling_route": self.profiling,
                "parallel": self.parallel, "world_size": self.world_size, "mode": self.mode}


def _local_config(root: str | None) -> dict[str, Any] | None:
    if not root:
        return None
    cfg = Path(root) / "config.json"
    try:
        doc = json.loads(cfg.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _probe_timeout(client: ServerClient) -> float:
    """Each probe request's deadline: PROBE_TIMEOUT_S, or the client's own when that is shorter."""
    return min(PROBE_TIMEOUT_S, client.timeout_s)


def _dev_info(client: ServerClient) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    status, doc = client.get_json("/server_info?config_format=json", timeout_s=_probe_timeout(client))
    if status != 200 or not isinstance(doc, dict) or not isinstance(doc.get("vllm_config"), dict):
        return None, None
    cfg = doc["vllm_config"]
    par = cfg.get("parallel_config") if isinstance(cfg.get("parallel_config"), dict) else None
    keep = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "enable_expert_parallel",
            "distributed_executor_backend")
    model = cfg.get("model_config") if isinstance(cfg.get("model_config"), dict) else None
    mkeep = ("enforce_eager", "dtype", "max_model_len", "quantization")
    return ({k: par.get(k) for k in keep if k in par} if par else None,
            {k: model.get(k) for k in mkeep if k in model} if model else None)


def probe(client: ServerClient) -> ServerInfo:
    """Ask the server what it is; raise one clear error when it is not a vLLM server serving a model."""
    url = client.endpoint.url
    status, doc = client.get_json("/version", timeout_s=_probe_timeout(client))
    if status != 200 or not isinstance(doc, dict) or not isinstance(doc.get("version"), str):
        raise ServerError(f"{url} answered but is not a vLLM server (GET /version: HTTP {status}"
                          f"{'' if status != 200 else ', no version field'})")
    status, models = client.get_json("/v1/models", timeout_s=_probe_timeout(client))
    data = models.get("data") if isinstance(models, dict) else None
    if status != 200 or not isinstance(data, list) or not data or not isinstance(data[0], dict):
        raise ServerError(f"{url} is vLLM {doc['version']} but GET /v1/models lists no model (HTTP {status})")
    m = data[0]
    status, schema = client.get_json("/openapi.json", timeout_s=_probe_timeout(client))
    paths = schema.get("paths") if status == 200 and isinstance(schema, dict) else None
    profiling = ("/start_profile" in paths) if isinstance(paths, dict) else None
    parallel, model_config = _dev_info(client)
    max_len = m.get("max_model_len") or (model_config or {}).get("max_model_len")
    root = m.get("root") if isinstance(m.get("root"), str) else None
    return ServerInfo(url=url, version=doc["version"], model_id=str(m.get("id")), root=root,
                      max_model_len=int(max_len) if max_len else None, profiling=profiling, parallel=parallel,
                      model_config=model_config, hf_config=_local_config(root))


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
