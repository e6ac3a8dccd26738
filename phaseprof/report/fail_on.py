"""``--fail-on``: a tiny threshold language for gating CI on a diff (grammar and examples in docs/diff.md).

    expr   := path OP number [unit]
    path   := [phase "."] [bucket "."] metric
    OP     := ">" | ">=" | "<" | "<="
    number := ["+" | "-"] digits ["." digits]
    unit   := "pp" | "%" | "ms" | "us"

The expression is about the change from A to B: ``moe.share > +2pp`` fails when moe's share of GPU busy grew
by more than 2 percentage points; ``decode.launches_per_step > +10%`` when launch calls per decode step grew by
more than 10 %. ``%`` is always a relative change, ``pp`` an absolute change of a percentage, ``ms``/``us``
an absolute change of a time, no unit an absolute change in the metric's own unit (ms, pp or count).
Without a phase the check runs on every phase both inputs have. Parsed by a hand-written tokenizer: never eval.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from phaseprof.classify.buckets import Bucket
from phaseprof.errors import PhaseprofError
from phaseprof.report.diff import PHASE_METRICS, TIMING_METRICS, BreakdownDiff, BucketDelta, Delta, PhaseDiff

PHASES: tuple[str, ...] = ("prefill", "mixed", "decode", "unknown")
#: Bucket metrics: name -> (view, field of BucketDelta). Times and counts are per step, shares in %.
BUCKET_METRICS: dict[str, tuple[str, str]] = {
    "time_ms": ("kernel_view", "time_ms"), "share": ("kernel_view", "share"), "count": ("kernel_view", "count"),
    "module_time_ms": ("module_view", "time_ms"), "module_share": ("module_view", "share"),
    "module_count": ("module_view", "count"),
}
_UNIT_OF_METRIC = {**{k: u for k, (_, u, _) in PHASE_METRICS.items()}, "other_idle_ms": "ms",
                   **{k: "ms" for k in TIMING_METRICS}, "time_ms": "ms", "module_time_ms": "ms", "share": "%",
                   "module_share": "%", "count": "count", "module_count": "count"}
_ALLOWED_UNITS = {"ms": ("", "ms", "us", "%"), "%": ("", "pp", "%"), "count": ("", "%")}
_TOKEN = re.compile(r"\s*(?:(?P<op>>=|<=|>|<)|(?P<num>[+-]?(?:\d+\.?\d*|\.\d+))|(?P<name>[A-Za-z_][A-Za-z0-9_]*)"
                    r"|(?P<dot>\.)|(?P<pct>%))")


@dataclass(frozen=True)
class Threshold:
    """One parsed ``--fail-on`` expression."""

    text: str
    phase: str | None  # None: every phase on both sides
    bucket: str | None  # for bucket metrics
    metric: str
    op: str
    value: float
    unit: str  # "pp" | "%" | "ms" | "us" | "" (the metric's own unit)


@dataclass(frozen=True)
class CheckResult:
    """One threshold on one phase. ``observed``: the change in the threshold's unit (relative % for "%";
    ``inf`` when A was 0 and B is not); ``failed``: ``observed OP value`` holds."""

    text: str
    phase: str | None
    a: float | None
    b: float | None
    observed: float
    unit: str
    failed: bool


def _bad(text: str, why: str) -> PhaseprofError:
    # No square brackets: the CLI prints errors through rich, which would take them for markup.
    return PhaseprofError(f"bad --fail-on {text!r}: {why} (e.g. 'moe.share > +2pp', "
                          "'decode.launches_per_step > +10%'; grammar in docs/diff.md)")


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            if text[pos:].strip() == "":
                break
            raise _bad(text, f"unexpected {text[pos:].strip()[:10]!r} at column {pos + 1}")
        kind = m.lastgroup or ""
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


def parse_threshold(text: str) -> Threshold:
    """Parse one expression; raises PhaseprofError (one line, exit 2) naming what is wrong."""
    toks = _tokens(text)
    path: list[str] = []
    i = 0
    while i < len(toks) and toks[i][0] == "name":
        path.append(toks[i][1])
        i += 1
        if i < len(toks) and toks[i][0] == "dot":
            i += 1
            if i >= len(toks) or toks[i][0] != "name":
                raise _bad(text, "a name must follow '.'")
        else:
            break
    if not path:
        raise _bad(text, "it must start with a metric name")
    if i >= len(toks) or toks[i][0] != "op":
        raise _bad(text, f"expected one of > >= < <= after {'.'.join(path)!r}")
    op = toks[i][1]
    i += 1
    if i >= len(toks) or toks[i][0] != "num":
        raise _bad(text, f"expected a number after {op!r}")
    value = float(toks[i][1])
    i += 1
    unit = ""
    if i < len(toks) and toks[i][0] in ("name", "pct"):
        unit = toks[i][1]
        i += 1
        if unit not in ("pp", "%", "ms", "us"):
            raise _bad(text, f"unknown unit {unit!r} (use pp, %, ms or us)")
    if i < len(toks):
        raise _bad(text, f"unexpected {toks[i][1]!r} after the threshold")
    return _resolve(text, path, op, value, unit)


def _resolve(text: str, path: list[str], op: str, value: float, unit: str) -> Threshold:
    if len(path) > 3:
        raise _bad(text, f"{'.'.join(path)!r} has too many parts")
    metric, rest = path[-1], path[:-1]
    phase = rest.pop(0) if rest and rest[0] in PHASES else None
    bucket = rest.pop(0) if rest else None
    if rest or (len(path) == 3 and phase is None):
        raise _bad(text, f"unknown phase {path[0]!r} (phases: {', '.join(PHASES)})")
    if metric not in _UNIT_OF_METRIC:
        names = sorted(set(_UNIT_OF_METRIC))
        raise _bad(text, f"unknown metric {metric!r} (metrics: {', '.join(names)})")
    if metric in BUCKET_METRICS and bucket is None:
        raise _bad(text, f"{metric!r} is a bucket metric: name the bucket, e.g. 'moe.{metric}'")
    if metric not in BUCKET_METRICS and bucket is not None:
        hint = "an unknown phase or " if phase is None else ""
        raise _bad(text, f"{bucket!r} is {hint}a bucket, but {metric!r} is not a bucket metric")
    if metric in TIMING_METRICS and phase is not None:
        raise _bad(text, f"{metric!r} is a run-level timing: write it without a phase")
    allowed = _ALLOWED_UNITS[_UNIT_OF_METRIC[metric]]
    if unit not in allowed:
        raise _bad(text, f"unit {unit!r} does not fit {metric!r} (allowed: "
                   f"{', '.join(repr(u) if u else 'none' for u in allowed)})")
    return Threshold(text=text.strip(), phase=phase, bucket=bucket, metric=metric, op=op, value=value, unit=unit)


def parse_thresholds(texts: list[str]) -> list[Threshold]:
    return [parse_threshold(t) for t in texts]


def _lookup(t: Threshold, ph: PhaseDiff) -> Delta:
    if t.bucket is None:
        d = ph.metric(t.metric)
        if d is None:
            raise PhaseprofError(f"--fail-on {t.text!r}: metric {t.metric!r} is not in the {ph.phase} phase")
        return d
    view, field = BUCKET_METRICS[t.metric]
    rows: tuple[BucketDelta, ...] = getattr(ph, view)
    row = next((r for r in rows if r.bucket == t.bucket), None)
    if row is None:
        return Delta(t.metric, _UNIT_OF_METRIC[t.metric], 0.0, 0.0, 0.0, None)  # absent on both sides: 0
    d: Delta = getattr(row, field)
    return d


def _observed(t: Threshold, d: Delta) -> float:
    a, b = d.a, d.b
    if a is None or b is None:
        side = "A" if a is None else "B"
        raise PhaseprofError(f"--fail-on {t.text!r}: {t.metric} is not recorded in {side}")
    if t.unit == "%":
        if a == 0:
            return 0.0 if b == 0 else math.copysign(math.inf, b)
        return 100.0 * (b - a) / abs(a)
    return (b - a) * (1e3 if t.unit == "us" else 1.0)


def _holds(x: float, op: str, v: float) -> bool:
    return {">": x > v, ">=": x >= v, "<": x < v, "<=": x <= v}[op]


def evaluate(thresholds: list[Threshold], d: BreakdownDiff) -> list[CheckResult]:
    """Evaluate every threshold on the diff. Raises PhaseprofError when a threshold names a phase, bucket or
    timing that the inputs do not have (a CI gate must not pass silently on a typo)."""
    known = {str(b) for b in Bucket} | {r.bucket for p in d.phases for r in p.kernel_view + p.module_view}
    out = []
    for t in thresholds:
        if t.bucket is not None and t.bucket not in known:
            raise PhaseprofError(f"--fail-on {t.text!r}: unknown bucket {t.bucket!r} "
                                 f"(buckets: {', '.join(sorted(known))})")
        if t.metric in TIMING_METRICS:
            dt = next((x for x in d.timings if x.metric == t.metric), None)
            if dt is None:
                raise PhaseprofError(f"--fail-on {t.text!r}: neither input carries a clean {t.metric} "
                                     "(only run directories from 'phaseprof capture' do)")
            targets: list[tuple[str | None, Delta]] = [(None, dt)]
        else:
            if t.phase is not None and d.phase(t.phase) is None:
                raise PhaseprofError(f"--fail-on {t.text!r}: phase {t.phase!r} is not in both inputs (A: "
                                     f"{', '.join(d.a.phases) or 'none'}; B: {', '.join(d.b.phases) or 'none'})")
            phases = [p for p in d.phases if t.phase in (None, p.phase)]
            if not phases:
                raise PhaseprofError(f"--fail-on {t.text!r}: A and B have no phase in common")
            targets = [(p.phase, _lookup(t, p)) for p in phases]
        for phase, delta in targets:
            obs = _observed(t, delta)
            unit = t.unit or {"%": "pp", "ms": "ms", "count": ""}[_UNIT_OF_METRIC[t.metric]]
            out.append(CheckResult(t.text, phase, delta.a, delta.b, obs, unit, _holds(obs, t.op, t.value)))
    return out


def describe(r: CheckResult) -> str:
    """One line: 'decode: launches_per_step > +10%: 587.8 → 425 (-27.7%)'."""
    obs = "new (A was 0)" if math.isinf(r.observed) else f"{r.observed:+.4g}{r.unit}"
    a = "-" if r.a is None else f"{r.a:.4g}"
    b = "-" if r.b is None else f"{r.b:.4g}"
    where = f"{r.phase}: " if r.phase else ""
    return f"{where}{r.text}: {a} → {b} ({obs})"
