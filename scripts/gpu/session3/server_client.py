"""Standalone client for a live `vllm serve` (standard library only): clean TTFT/TPOT, then one profiled pair.

    python3 server_client.py --base http://127.0.0.1:8000 --trace-dir DIR --out client.json [--ranks 2]

1. waits for ``/health``; records ``/version`` and ``/v1/models``;
2. clean timing through the streaming completions endpoint, prompts as exact token-id lists (phaseprof's seeded
   generator: ``random.Random(f"phaseprof:{seed}:{n}")``, ids in [10, vocab)): TTFT of a ``--tokens`` prompt
   with ``max_tokens=1`` (time from sending the request to the first data chunk; 2 warm-ups, median of 5), and
   TPOT of a ``--decode-prompt`` + ``--decode-out`` request ((last chunk - first chunk) / (tokens - 1), from
   chunk arrival times; 1 warm-up, median of 5); the same TPOT for a ``--tokens`` prompt (3 reps);
3. ``POST /start_profile``, one ``--tokens`` prefill request (max_tokens=1), one decode request
   (``--decode-prompt`` + ``--profile-decode-out``), ``POST /stop_profile``, then waits until the new trace files
   in ``--trace-dir`` stop growing (at least ``--ranks`` worker traces).
Writes ``--out`` (JSON) after every stage.
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import statistics
import sys
import time
import urllib.parse
from pathlib import Path
from typing import Any


def prompt_ids(n: int, *, vocab: int, seed: int) -> list[int]:
    """phaseprof's random_prompt: the same seed and length give the same ids."""
    rng = random.Random(f"phaseprof:{seed}:{n}")
    return [rng.randrange(10, max(vocab, 11)) for _ in range(n)]


class Server:
    def __init__(self, base: str, timeout_s: float = 300.0) -> None:
        u = urllib.parse.urlsplit(base)
        self.host, self.port = u.hostname or "127.0.0.1", u.port or 80
        self.timeout_s = timeout_s

    def _conn(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
        c = self._conn()
        try:
            data = None if body is None else json.dumps(body).encode()
            c.request(method, path, body=data, headers={"Content-Type": "application/json"})
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def wait_healthy(self, deadline_s: float) -> float:
        t0 = time.monotonic()
        while time.monotonic() - t0 < deadline_s:
            try:
                status, _ = self.request("GET", "/health")
                if status == 200:
                    return time.monotonic() - t0
            except OSError:
                pass
            time.sleep(2.0)
        raise TimeoutError(f"server not healthy after {deadline_s:.0f} s")

    def stream(self, model: str, ids: list[int], max_tokens: int) -> dict[str, Any]:
        """One streaming completion; chunk arrival times (perf_counter, s) relative to the send."""
        body = {"model": model, "prompt": ids, "max_tokens": max_tokens, "stream": True, "ignore_eos": True,
                "temperature": 0.0, "return_token_ids": True, "stream_options": {"include_usage": True}}
        c = self._conn()
        try:
            data = json.dumps(body).encode()
            t0 = time.perf_counter()
            c.request("POST", "/v1/completions", body=data, headers={"Content-Type": "application/json"})
            r = c.getresponse()
            if r.status != 200:
                raise RuntimeError(f"completions HTTP {r.status}: {r.read()[:500]!r}")
            times: list[float] = []
            tokens: list[int] = []
            usage = None
            while True:
                line = r.readline()
                if not line:
                    break
                line = line.strip()
                if not line.startswith(b"data:"):
                    continue
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    break
                now = time.perf_counter() - t0
                msg = json.loads(payload)
                if msg.get("usage"):
                    usage = msg["usage"]
                for ch in msg.get("choices") or []:
                    got = ch.get("token_ids") or []
                    if got or ch.get("text"):
                        times.append(now)
                        tokens.extend(got)
            return {"ttft_s": times[0] if times else None, "chunk_times_s": times, "n_tokens": len(tokens),
                    "usage": usage, "total_s": time.perf_counter() - t0}
        finally:
            c.close()


def tpot_s(rec: dict[str, Any]) -> float | None:
    t = rec["chunk_times_s"]
    n = rec["n_tokens"]
    if len(t) < 2 or n < 2:
        return None
    return (t[-1] - t[0]) / (n - 1)


def stats_ms(values_s: list[float]) -> dict[str, Any]:
    v = sorted(x * 1e3 for x in values_s)
    if not v:
        return {"n": 0}
    q = statistics.quantiles(v, n=10, method="inclusive") if len(v) > 1 else [v[0]] * 9
    return {"n": len(v), "median_ms": round(statistics.median(v), 3), "p10_ms": round(q[0], 3),
            "p90_ms": round(q[-1], 3), "min_ms": round(v[0], 3), "max_ms": round(v[-1], 3),
            "values_ms": [round(x, 3) for x in v]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default="http://127.0.0.1:8000")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--trace-dir", type=Path, required=True)
    ap.add_argument("--ranks", type=int, default=1, help="worker traces expected per profile")
    ap.add_argument("--vocab", type=int, default=248320)
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--decode-prompt", type=int, default=128)
    ap.add_argument("--decode-out", type=int, default=32)
    ap.add_argument("--profile-decode-out", type=int, default=16)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--health-wait-s", type=float, default=420.0)
    ap.add_argument("--flush-wait-s", type=float, default=180.0)
    args = ap.parse_args(argv)

    srv = Server(args.base)
    doc: dict[str, Any] = {"base": args.base, "argv": sys.argv}

    def save() -> None:
        args.out.write_text(json.dumps(doc, indent=2))

    def log(msg: str) -> None:
        print(f"[client {time.strftime('%H:%M:%S')}] {msg}", flush=True)

    doc["health_wait_s"] = round(srv.wait_healthy(args.health_wait_s), 1)
    for path in ("/version", "/v1/models"):
        status, body = srv.request("GET", path)
        doc[path] = {"status": status, "body": json.loads(body) if status == 200 else body.decode()[:500]}
    model = doc["/v1/models"]["body"]["data"][0]["id"]
    doc["model"] = model
    log(f"healthy after {doc['health_wait_s']} s; version {doc['/version']}; model {model}")
    save()

    def ids(n: int, seed: int) -> list[int]:
        return prompt_ids(n, vocab=args.vocab, seed=seed)

    # TTFT of the long prompt: 2 warm-ups, then reps (seeds differ: prefix caching could not help anyway).
    for w in range(2):
        srv.stream(model, ids(args.tokens, 100 + w), 1)
    ttft = [srv.stream(model, ids(args.tokens, 200 + r), 1) for r in range(args.reps)]
    doc["ttft"] = {"prompt_tokens": args.tokens, "max_tokens": 1, "warmup": 2,
                   "definition": "send -> first streamed data chunk carrying a token (client perf_counter)",
                   **stats_ms([r["ttft_s"] for r in ttft]),
                   "total_ms": [round(r["total_s"] * 1e3, 3) for r in ttft]}
    log(f"TTFT {args.tokens}: {doc['ttft']['median_ms']} ms")
    save()

    for key, n_prompt, n_out, reps in (("tpot", args.decode_prompt, args.decode_out, args.reps),
                                       ("tpot_long_prompt", args.tokens, args.decode_out, 3)):
        srv.stream(model, ids(n_prompt, 300), n_out)
        recs = [srv.stream(model, ids(n_prompt, 400 + r), n_out) for r in range(reps)]
        doc[key] = {"prompt_tokens": n_prompt, "max_tokens": n_out, "warmup": 1,
                    "definition": "(last token chunk - first token chunk) / (tokens - 1), per request; median",
                    **stats_ms([t for t in (tpot_s(r) for r in recs) if t is not None]),
                    "ttft_ms": [round(r["ttft_s"] * 1e3, 3) for r in recs],
                    "tokens": [r["n_tokens"] for r in recs]}
        log(f"{key} {n_prompt}+{n_out}: {doc[key].get('median_ms')} ms")
        save()

    before = {p.name for p in args.trace_dir.glob("*")} if args.trace_dir.exists() else set()
    t = time.perf_counter()
    status, body = srv.request("POST", "/start_profile")
    doc["start_profile"] = {"status": status, "s": round(time.perf_counter() - t, 3)}
    prof_prefill = srv.stream(model, ids(args.tokens, 500), 1)
    prof_decode = srv.stream(model, ids(args.decode_prompt, 501), args.profile_decode_out)
    t = time.perf_counter()
    status, body = srv.request("POST", "/stop_profile")
    doc["stop_profile"] = {"status": status, "s": round(time.perf_counter() - t, 3)}
    doc["profiled"] = {
        "prefill": {"prompt_tokens": args.tokens, "max_tokens": 1, "ttft_ms": round(prof_prefill["ttft_s"] * 1e3, 3)},
        "decode": {"prompt_tokens": args.decode_prompt, "max_tokens": args.profile_decode_out,
                   "tokens": prof_decode["n_tokens"], "tpot_ms": round((tpot_s(prof_decode) or 0) * 1e3, 3)}}
    log(f"profiled: {doc['profiled']}; stop_profile {doc['stop_profile']}")
    save()

    # Wait for the new trace files to be complete: sizes unchanged for 5 s and at least `ranks` worker traces.
    t0 = time.monotonic()
    last: dict[str, int] = {}
    stable_since = time.monotonic()
    while time.monotonic() - t0 < args.flush_wait_s:
        now = {p.name: p.stat().st_size for p in args.trace_dir.glob("*") if p.name not in before}
        if now != last:
            last, stable_since = now, time.monotonic()
        traces = [n for n in now if ".pt.trace.json" in n and not n.endswith(".tmp")]
        workers = [n for n in traces if "async_llm" not in n.lower()]
        if len(workers) >= args.ranks and time.monotonic() - stable_since >= 5.0:
            break
        time.sleep(1.0)
    doc["trace_files"] = last
    doc["trace_wait_s"] = round(time.monotonic() - t0, 1)
    log(f"trace files after {doc['trace_wait_s']} s: {last}")
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
