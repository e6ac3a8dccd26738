"""``phaseprof capture --server URL``: time and profile one phase on a running vLLM server.

Order: trace directory exists -> server is vLLM, serves a model, has the profiling route -> the request fits
``max_model_len`` -> ``warmup`` + ``reps`` clean rounds (streamed, client clock) -> one profiled round between
``POST /start_profile`` and ``POST /stop_profile`` -> the new rank traces in ``--trace-dir`` exported during this
capture's ``/stop_profile`` (never another client's: traces.ProfileWindow), once complete ->
the run directory, written atomically: one rank gives ``trace.json.gz`` + ``breakdown.json`` + ``run.json``
(as an in-process capture); several give ``ranks/`` + ``rank<N>.breakdown.json`` + ``run.json``.
With ``ray`` (a cluster address) the traces are looked for on every node and those on other nodes are analysed
there (``capture/server/ray_nodes.py``): ``ranks/`` holds this node's only, plus ``multirank.json``.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from phaseprof import __version__
from phaseprof.capture.server.client import ServerClient, ServerError, StreamedRequest, parse_url
from phaseprof.capture.server.probe import (
    FALLBACK_VOCAB,
    ServerInfo,
    check_length,
    check_profiling,
    probe,
    profiling_disabled,
)
from phaseprof.capture.server.rounds import CLIENT_CLOCK, RequestPlan, run_round, run_rounds, timing_from_streams
from phaseprof.capture.server.traces import (
    Collected,
    ProfileWindow,
    RankTraces,
    missing_ranks,
    missing_ranks_message,
    snapshot,
    trace_dir_or_error,
    wait_for_traces,
)
from phaseprof.capture.shared.options import CaptureOptions, Phase
from phaseprof.capture.shared.request import CaptureRequest, Server
from phaseprof.capture.shared.rundir import (
    analyze_into,
    in_final_place,
    make_readable,
    run_dir_name,
    run_directory,
    unique_run_dir,
    utc_stamp,
)
from phaseprof.capture.shared.record import capture_record
from phaseprof.capture.shared.result import CaptureResult
from phaseprof.capture.shared.timing import PhaseTiming
from phaseprof.capture.shared.trace_file import DEFAULT_MAX_TRACE_BYTES, finalize_trace
from phaseprof.errors import PhaseprofError
from phaseprof.records import ModelInfo, RunDir, RunRecord, ServerRecord
from phaseprof.trace.limits import MAX_WHOLE_DOCUMENT_BYTES, inflate, open_trace

#: Requests one capture may send in all (warm-up + reps + profiled rounds, times concurrency).
MAX_REQUESTS = 1000


@dataclass(frozen=True)
class ServerTarget:
    """A running vLLM server: ``url`` (http://HOST:PORT) and ``timeout_s``, the most one HTTP request to it
    may take."""

    url: str
    timeout_s: float = 600.0


@dataclass(frozen=True)
class ServerCapture:
    """One capture request (``capture``, as in-process; its ``concurrency`` requests run at once in every round,
    the timed ones and the profiled one) on ``server``. The new rank traces are collected from ``trace_dir`` (the
    server's torch_profiler_dir as seen from here), waiting at most ``trace_wait_s`` after ``/stop_profile``."""

    capture: CaptureOptions
    server: ServerTarget
    trace_dir: Path
    trace_wait_s: float = 120.0
    max_trace_bytes: int = DEFAULT_MAX_TRACE_BYTES
    ray: str | None = None  # a Ray cluster's address: collect from every node of it (capture/server/ray_nodes.py)

    @classmethod
    def of(cls, request: CaptureRequest) -> ServerCapture:
        """The capture ``request`` asks of its ``Server`` target (one phase, one prompt length)."""
        t = request.target
        if not isinstance(t, Server):
            raise TypeError(f"a server capture of a request {request.where}")
        return cls(capture=request.capture_options(request.workload.phase[0], request.workload.tokens[0]),
                   server=ServerTarget(t.server, timeout_s=t.request_timeout), trace_dir=t.trace_dir,
                   trace_wait_s=t.trace_wait, max_trace_bytes=request.max_trace_bytes, ray=t.ray)


def connect(url: str, *, timeout_s: float, max_requests: int = MAX_REQUESTS) -> tuple[ServerClient, ServerInfo]:
    """A client bound to ``url`` and what the server is (raises one clear line when it is no vLLM server)."""
    client = ServerClient(parse_url(url), timeout_s=timeout_s, max_requests=max_requests)
    return client, probe(client)


def post_profile(client: ServerClient, path: str, info: ServerInfo, timeout_s: float) -> None:
    resp = client.request("POST", path, timeout_s=timeout_s)
    if resp.status == 404:
        raise profiling_disabled(info.url)
    if resp.status != 200:
        raise ServerError(f"{info.url}{path} failed (HTTP {resp.status})")


def _profiled_metric_ms(phase: Phase, rnd: list[StreamedRequest]) -> float | None:
    vals = [r.ttft_s if phase is Phase.PREFILL else r.tpot_s for r in rnd]
    ok = sorted(v for v in vals if v is not None)
    return ok[len(ok) // 2] * 1e3 if ok else None


#: The most of a server's trace read, decompressed: ``finalize_trace`` holds the whole document in memory (a few
#: times its size), so past the analyser's whole-document bound the trace is refused, not read (a 4 GB trace,
#: a gzip bomb). The largest public vLLM trace inflates to 55 MB.
MAX_SERVER_TRACE_BYTES = MAX_WHOLE_DOCUMENT_BYTES


def _plain_trace(src: Path, work: Path, *, limit: int | None = None) -> Path:
    """finalize_trace reads plain JSON: gunzip vLLM's ``.json.gz`` into the work directory, at most ``limit``
    bytes of it (every gzip member, as ``gzip -dc``); a regular file only. One PhaseprofError naming the file
    when it is bigger or not a trace file at all."""
    limit = MAX_SERVER_TRACE_BYTES if limit is None else limit
    with open_trace(src) as f:  # regular file, opened without blocking
        size = os.fstat(f.fileno()).st_size
        too_big = f"over {limit >> 20} MB decompressed: a server trace that large is not read (memory)"
        if not src.name.endswith(".gz"):
            if size > limit:
                raise PhaseprofError(too_big, path=src)
            return src
        dest = work / src.name.removesuffix(".gz")
        written = 0
        try:
            with dest.open("wb") as g:
                for piece in inflate(iter(lambda: f.read(1 << 20), b""), 1 << 20):
                    written += len(piece)
                    if written > limit:
                        raise PhaseprofError(too_big, path=src)
                    g.write(piece)
        except (zlib.error, EOFError) as e:
            raise PhaseprofError(f"not a complete gzip file ({e})", path=src) from None
    return dest


def capture_from_server(req: ServerCapture, *, console: Console, argv: list[str] | None = None
                        ) -> CaptureResult:
    """Run the whole capture (see the module docstring) and return what was written."""
    c, target = req.capture, req.server
    if req.ray is not None:
        from phaseprof.capture.server.ray_nodes import snapshot_cluster  # noqa: PLC0415
        from phaseprof.scale.ray_run import connect as connect_ray  # noqa: PLC0415

        connect_ray(req.ray)
        snapshot_cluster(str(req.trace_dir))  # the directory exists on some node: checked before any request
        trace_dir = req.trace_dir
    else:
        trace_dir = trace_dir_or_error(req.trace_dir)
    n_requests = (c.warmup + c.reps + 1) * c.concurrency
    if n_requests > MAX_REQUESTS:
        raise PhaseprofError(f"(warmup + reps + 1) x concurrency = {n_requests} requests exceeds the limit of "
                             f"{MAX_REQUESTS}; use fewer --reps or lower --concurrency")
    client, info = connect(target.url, timeout_s=target.timeout_s, max_requests=n_requests)
    check_profiling(info)
    check_length(info, prompt_tokens=c.prompt_tokens, output_tokens=c.max_tokens)
    vocab = info.vocab_size or FALLBACK_VOCAB
    plan = RequestPlan(model=info.model_id, prompt_tokens=c.prompt_tokens, max_tokens=c.max_tokens,
                       vocab_size=vocab, seed=c.seed)
    what = f"{c.phase} {c.label} x{c.concurrency}"
    with console.status(f"Timing {what} on {info.url}: {c.warmup} warm-up + {c.reps} rounds (no profiler)"):
        run_rounds(client, plan, rounds=c.warmup, concurrency=c.concurrency)
        rounds = run_rounds(client, plan, rounds=c.reps, concurrency=c.concurrency)
    timing = timing_from_streams(rounds, phase=c.phase, prompt_tokens=c.prompt_tokens, output_tokens=c.max_tokens,
                                 warmup=c.warmup)
    collect = _Collector(req.ray, trace_dir)
    with console.status(f"Profiling {what} (the server's own profiler)") as status:
        post_profile(client, "/start_profile", info, target.timeout_s)
        try:
            profiled = run_round(client, plan, c.concurrency)
        finally:
            status.update("Stopping the profiler (the server writes its traces now)")
            stop_sent = time.time_ns()  # this capture's traces are exported while /stop_profile runs
            post_profile(client, "/stop_profile", info, target.timeout_s)
        window = ProfileWindow(stop_sent, time.time_ns())
        collected = collect.wait(expected=info.world_size, timeout_s=req.trace_wait_s, window=window,
                                 on_wait=status.update)
    rank_files = [(r, p) for r, p in zip(collected.ranks, collected.files, strict=True) if r is not None]
    other = [p for r, p in zip(collected.ranks, collected.files, strict=True) if r is None]
    if not rank_files:
        raise PhaseprofError("new traces appeared but none is a worker rank's trace "
                             f"({', '.join(p.name for p in other)})", path=trace_dir)
    prof_ms = _profiled_metric_ms(c.phase, profiled)
    clean_ms = timing.headline.median_ms
    ratio = prof_ms / clean_ms if prof_ms is not None and clean_ms > 0 else None
    final = unique_run_dir(c.out, run_dir_name(device_slug="server", model_slug=info.model_slug,
                                               phase=str(c.phase), tokens=c.label, stamp=utc_stamp()))
    meta = capture_record(  # what the traces embed: RunRecord.embedded, the server's subset
        c, timing, argv=argv, clock=CLIENT_CLOCK, source="server", server=ServerRecord(url=info.url),
        model=ModelInfo(name=info.model_id), versions={"vllm": info.version}).embedded()
    with run_directory(final) as tmp:
        with console.status("Analyzing the rank traces"):
            if collect.remote_ranks():
                ranks = collect.write_cluster(tmp, final, world_size=info.world_size)
            else:
                ranks = write_rank_traces(tmp, final, rank_files, world_size=info.world_size, trace_dir=trace_dir,
                                          metadata=meta, max_trace_bytes=req.max_trace_bytes,
                                          model_config=info.hf_config, quant=info.quant,
                                          missing_note=collect.missing_note)
                ranks = collect.with_locations(ranks)
        breakdowns, err, trace_doc, warnings = ranks.breakdowns, ranks.error, ranks.trace_doc, list(ranks.warnings)
        rec = _run_json(req, info, timing, prof_ms, ratio, collected, other, trace_doc, breakdowns, err, warnings,
                        client.sent, argv)
        RunDir(tmp).write(rec)
        make_readable(tmp)
    return CaptureResult(run_dir=final, record=rec, timing=timing, overhead_ratio=ratio, breakdowns=breakdowns,
                         breakdown_error=err, warnings=tuple(warnings), rank_summary=ranks.summary,
                         run=rec.to_dict())


class _Collector:
    """Where the new traces are looked for: ``trace_dir`` on this machine, or on every node of a Ray cluster
    (``ray``: its address; the driver is connected already). Snapshots at creation (before /start_profile)."""

    def __init__(self, ray: str | None, trace_dir: Path) -> None:
        self.ray, self.trace_dir = ray, trace_dir
        self.cluster: Any = None  # ray_nodes.ClusterCollected once waited for, with --ray
        if ray is None:
            self.before = snapshot(trace_dir)
        else:
            from phaseprof.capture.server.ray_nodes import snapshot_cluster  # noqa: PLC0415

            self.nodes = snapshot_cluster(str(trace_dir))

    def wait(self, *, expected: int | None, timeout_s: float, window: ProfileWindow, on_wait: Any) -> Collected:
        """The new traces of this capture's profile ``window`` (traces.ProfileWindow), once complete."""
        if self.ray is None:
            return wait_for_traces(self.trace_dir, self.before, expected=expected, timeout_s=timeout_s,
                                   window=window, on_wait=on_wait)
        from phaseprof.capture.server.ray_nodes import wait_on_cluster  # noqa: PLC0415

        self.cluster = wait_on_cluster(self.nodes, expected=expected, timeout_s=timeout_s, window=window,
                                       on_wait=on_wait)
        return self.cluster.collected

    def _ranked(self) -> list[tuple[int, Any]]:
        cc = self.cluster
        return [(r, f) for r, f in zip(cc.collected.ranks, cc.where, strict=True) if r is not None]

    def remote_ranks(self) -> bool:
        """With --ray: whether some rank's trace is on another node than this driver's."""
        if self.cluster is None:
            return False
        from phaseprof.scale.ray_run import this_node  # noqa: PLC0415

        here = this_node()
        return any(f.node_id != here for _, f in self._ranked())

    def write_cluster(self, tmp: Path, final: Path, *, world_size: int | None) -> RankTraces:
        from phaseprof.capture.server.ray_nodes import write_cluster_rank_traces  # noqa: PLC0415

        return write_cluster_rank_traces(tmp, final, self._ranked(), world_size=world_size,
                                         trace_dir=str(self.trace_dir), nodes=self.nodes)

    def missing_note(self, missing: list[int], world_size: int) -> str:
        if self.ray is None:
            return missing_ranks_message(missing, world_size, self.trace_dir)
        from phaseprof.capture.server.ray_nodes import missing_on_cluster_message  # noqa: PLC0415

        return missing_on_cluster_message(missing, world_size, str(self.trace_dir), len(self.nodes))

    def with_locations(self, ranks: RankTraces) -> RankTraces:
        """With --ray and every trace on this node: run.json's ``trace`` entry says so, rank by rank."""
        if self.cluster is None:
            return ranks
        from phaseprof.capture.server.ray_nodes import rank_location  # noqa: PLC0415

        copied = ranks.trace_doc.get("file") or ranks.trace_doc.get("ranks_dir")
        one = "file" in ranks.trace_doc  # one rank: its trace.json.gz; several: ranks/<name>
        locs = [rank_location(r, f, copied_to=copied if one else f"{copied}/{Path(f.path).name}")
                for r, f in self._ranked()]
        return dataclasses.replace(ranks, trace_doc={**ranks.trace_doc, "rank_locations": locs})


def write_rank_traces(tmp: Path, final: Path, rank_files: list[tuple[int, Path]], *, world_size: int | None,
                      trace_dir: Path, metadata: dict[str, Any],
                      max_trace_bytes: int = DEFAULT_MAX_TRACE_BYTES,
                      model_config: dict[str, Any] | None = None, quant: str | None = None,
                      missing_note: Callable[[list[int], int], str] | None = None) -> RankTraces:
    """Copy and analyse collected rank traces into the run directory being written (``tmp``, renamed to
    ``final`` later). One rank: ``trace.json.gz`` (finalized as an in-process capture's, ``metadata`` as its
    ``phaseprof`` key) + ``breakdown.json``. Several: ``ranks/`` (files as vLLM wrote them),
    ``rank<N>.breakdown.json`` and ``multirank.json`` (the report ``phaseprof analyze`` gives for ``ranks/``).
    ``world_size``: ranks the server runs (None = the traces' own
    ``distributedInfo``); ranks without a file here are named in a warning. ``model_config``: the served
    model's config.json (the one rank's breakdown gets its speed of light from it, with ``quant``, the
    weights' format as served). ``missing_note``: the
    warning for missing ranks (default: they have no file in ``trace_dir``)."""
    warnings: list[str] = []
    summary = None
    if len(rank_files) == 1:
        try:
            with tempfile.TemporaryDirectory(prefix="phaseprof-raw-") as work:
                trace = finalize_trace(_plain_trace(rank_files[0][1], Path(work)), tmp / "trace.json.gz",
                                       metadata=metadata, max_bytes=max_trace_bytes)
        except PhaseprofError as e:  # the trace is refused; the run directory keeps the timings and says why
            bd, err, trace_doc = None, f"trace not kept: {e}", {"file": None, "refused": str(e)}
        else:
            bd, err = analyze_into(tmp / "trace.json.gz", tmp, final_trace=final / "trace.json.gz",
                                   model_config=model_config, quant=quant)
            trace_doc = trace.to_dict()
        breakdowns = {} if bd is None else {rank_files[0][0]: bd}
        traced = (bd.trace.distributed or {}).get("world_size") if bd is not None else None
        world = world_size or traced
    else:
        summary, err = _analyze_ranks(rank_files, tmp, final)
        breakdowns = dict(summary.ranks) if summary is not None else {}
        world = world_size or (summary.world_size if summary is not None else None)
        trace_doc = {"ranks_dir": "ranks", "files": sorted(p.name for _, p in rank_files),
                     "multirank": "multirank.json" if summary is not None else None}
    lost = missing_ranks([r for r, _ in rank_files], world)
    if lost:
        note = missing_note or (lambda m, w: missing_ranks_message(m, w, trace_dir))
        warnings.append(note(lost, int(world or 0)))
    return RankTraces(breakdowns, err, trace_doc, tuple(warnings), summary)


def _analyze_ranks(rank_files: list[tuple[int, Path]], tmp: Path, final: Path) -> tuple[Any, str | None]:
    """Copy the rank traces into ``tmp/ranks`` and analyse them as ``phaseprof analyze`` does: the summary
    (None and why on failure), naming the traces under ``final``; each rank's breakdown and
    ``multirank.json`` written into ``tmp``."""
    from phaseprof.scale.ranks import analyze_ranks, find_trace_files  # noqa: PLC0415
    from phaseprof.scale.report import write_rank_outputs  # noqa: PLC0415

    ranks_dir = tmp / "ranks"
    ranks_dir.mkdir()
    for _, p in rank_files:  # a rank trace past the bound is not copied (a 4 GB file, a bomb's container)
        if p.stat().st_size > MAX_SERVER_TRACE_BYTES:
            return None, (f"analysis failed: {p.name}: over {MAX_SERVER_TRACE_BYTES >> 20} MB on disk: a server "
                          "trace that large is not read (memory)")
        shutil.copy2(p, ranks_dir / p.name)
    try:
        summary = in_final_place(analyze_ranks(find_trace_files(ranks_dir)), tmp, final)
    except PhaseprofError as e:
        return None, f"analysis failed: {e}"
    write_rank_outputs(summary, tmp)
    return summary, None


def _steps(breakdowns: dict[int, Any]) -> dict[str, Any]:
    """Per rank: profiled steps per phase, as the analysis counted them."""
    return {str(r): {ph.phase: ph.steps for ph in bd.phases} for r, bd in sorted(breakdowns.items())}


def _run_json(req: ServerCapture, info: ServerInfo, timing: PhaseTiming, prof_ms: float | None,
              ratio: float | None, collected: Collected, other: list[Path], trace_doc: dict[str, Any],
              breakdowns: dict[int, Any], err: str | None, warnings: list[str], sent: int,
              argv: list[str] | None) -> RunRecord:
    """The run's record (docs/capture.md, "Live server"): the one capture record (``capture_record``), plus what
    only a server run has (``source``, ``server``, ``requests_sent``, ``vocab_size``, ``rank_breakdowns``,
    ``warnings``). The server's own parts (its answers, the traces' facts) are read typed by ``RunRecord``."""
    c = req.capture
    first = next(iter(breakdowns.values()), None)
    gpu = getattr(getattr(first, "trace", None), "gpu_name", None)
    platform = getattr(getattr(first, "trace", None), "platform", None)
    multi = bool(breakdowns) and not err and "file" not in trace_doc
    parts = RunRecord.from_dict({
        "server": {**info.to_dict(), "trace_dir": str(req.trace_dir)},
        "device": {"kind": platform, "name": gpu or platform},
        "model": {"name": info.model_id, "kind": "server", "path": info.root, "architecture": info.architecture},
        "profile": {
            "profiler": "the server's own (--profiler-config), one trace per rank",
            "profiled_requests": c.concurrency,
            "profiled_median_ms": None if prof_ms is None else round(prof_ms, 4),
            "overhead_ratio": None if ratio is None else round(ratio, 4),
            "overhead_definition": "profiled / clean median of the headline metric, client clock",
            "trace_wait_s": collected.waited_s,
            "rank_traces": sorted(p.name for p in collected.files if p not in other),
            "other_new_traces": sorted(p.name for p in other),
            "steps": _steps(breakdowns),
            "note": "other clients' requests during the profiled round would appear in the trace too",
        },
        "trace": trace_doc,
    }, source=RunDir.RECORD)
    return capture_record(
        c, timing, argv=argv, clock=CLIENT_CLOCK,
        prompt="random token ids, one seeded prompt per request (seed + request index), so no request hits the "
               "prefix cache of an earlier one"
               + ("" if info.vocab_size else f"; ids below {FALLBACK_VOCAB} (vocabulary unknown)"),
        source="server", server=parts.server, versions={"vllm": info.version, "phaseprof": __version__},
        mode=info.mode, quant=info.quant, device=parts.device, model=parts.model,
        model_config=info.hf_config,  # as the server reports it: speed of light needs no --model-config
        requests_sent=sent, profile=parts.profile, trace=parts.trace,
        breakdown=None if err or not breakdowns or multi else "breakdown.json", breakdown_error=err,
        vocab_size=info.vocab_size or FALLBACK_VOCAB, warnings=warnings,
        rank_breakdowns=[f"rank{r}.breakdown.json" for r in sorted(breakdowns)] if multi else None)
