"""Classification rules as data: load and validate TOML rule files.

A rule file holds two ordered lists of tables, ``[[kernel]]`` (matched against GPU kernel names, or CPU op
names on CPU-only traces) and ``[[module]]`` (matched against the op names of the enclosing CPU stack).
Each table has ``bucket`` and ``patterns`` (regexes, found anywhere in the name like ``re.search``), and
optionally ``why`` and ``examples`` (real names the rule must match; checked when the file is loaded). First
match wins; there are no priorities. User files given with ``--rules`` come before the default file, so they
override it.

Patterns are compiled and matched by RE2 (``google-re2``), a linear-time engine: a user pattern with
catastrophic backtracking under Python's ``re`` (``(a+)+$`` took 26 s on a 28-character name) matches in
microseconds here, at load time (the rule's own examples) and at match time alike. The syntax is Python's minus
lookaround and backreferences, which RE2 rejects with a message; deeply nested groups are fine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

import re2

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from phaseprof.classify.buckets import Bucket
from phaseprof.errors import PhaseprofError
from phaseprof.toml_checks import check_keys
from phaseprof.trace.limits import require_regular_file

DEFAULT_RULES_PATH = Path(__file__).with_name("rules") / "default.toml"
SECTIONS = ("kernel", "module")
_REQUIRED_KEYS = frozenset({"bucket", "patterns"})
_ALLOWED_KEYS = _REQUIRED_KEYS | {"why", "examples"}
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # RE2 would also log every bad pattern to stderr; the error says it once
_MAX_RULES_BYTES = 4 << 20  # a rules file is a few KB of TOML; a bigger one is not one


@dataclass(frozen=True)
class Rule:
    """One ordered matcher: a name belongs to ``bucket`` if any pattern is found in it."""

    bucket: Bucket
    patterns: tuple[re2._Regexp, ...]  # RE2: linear-time matching, whatever the pattern
    why: str = ""
    examples: tuple[str, ...] = ()
    origin: str = field(default="", compare=False)  # "file.toml [[kernel]] #3": where the rule came from
    # [the patterns as one RE2 alternation, or None when that does not compile], built on first use
    _any: list[re2._Regexp | None] = field(default_factory=list, init=False, repr=False, compare=False,
                                          hash=False)

    def match(self, name: str) -> bool:
        """Whether any pattern is found in ``name``: one search of all patterns at once (see
        :func:`_alternation`), else one per pattern."""
        if not self._any:
            self._any.append(_alternation([p.pattern for p in self.patterns]))
        combined = self._any[0]
        if combined is not None:
            return combined.search(name) is not None
        return self.matching_pattern(name) is not None

    def matching_pattern(self, name: str) -> re2._Regexp | None:
        """The first pattern found in ``name``, or None."""
        for pattern in self.patterns:
            if pattern.search(name):
                return pattern
        return None


@dataclass(frozen=True)
class RuleSet:
    """Kernel-view and module-view rules, each in match order (user rules first, then the default)."""

    kernel: tuple[Rule, ...]
    module: tuple[Rule, ...]
    # name -> bucket memo per view; lookups are pure, so caching them changes no result.
    _memo: dict[tuple[str, str], Bucket | None] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False
    )
    # view -> one RE2 alternation of all its patterns (or None: not compilable as one), built on first use
    _any: dict[str, re2._Regexp | None] = field(default_factory=dict, init=False, repr=False, compare=False,
                                                hash=False)
    # view -> (an RE2 set of all its patterns, each pattern's rule number), or None where RE2 would not build one
    _sets: dict[str, tuple[re2.Set, tuple[int, ...]] | None] = field(default_factory=dict, init=False, repr=False,
                                                                      compare=False, hash=False)

    def first_by_set(self, name: str, view: str) -> Rule | None:
        """The first of ``view``'s rules with a pattern found in ``name``, from one pass of an RE2 set over the
        name (a search per rule until one matched was most of the kernel classification), or None where
        the set finds no pattern, or RE2 gave up (which it reports the same way): the caller then tries the rules
        one by one (``classifier.first_match``)."""
        if view not in self._sets:
            self._sets[view] = _pattern_set(self.kernel if view == "kernel" else self.module)
        built = self._sets[view]
        if built is None:
            return None
        found = built[0].Match(name)  # RE2 fills the list only on success, and then with every pattern found
        if not found:
            return None
        return (self.kernel if view == "kernel" else self.module)[min(built[1][i] for i in found)]

    def may_match(self, name: str, view: str) -> bool:
        """False only when no pattern of ``view``'s rules is found in ``name`` (one RE2 pass over the name
        instead of one per pattern: most op names match no module rule). Each pattern is wrapped in its own
        group, so inline flags keep their scope; should the alternation not compile (e.g. a group name used
        twice), every name may match."""
        if view not in self._any:
            texts = [p.pattern for r in (self.kernel if view == "kernel" else self.module) for p in r.patterns]
            self._any[view] = _alternation(texts)
            if not texts:
                return False
        combined = self._any[view]
        return combined is None or combined.search(name) is not None


def _pattern_set(rules: tuple[Rule, ...]) -> tuple[re2.Set, tuple[int, ...]] | None:
    """An unanchored RE2 set of every pattern of ``rules`` (the rules' own options: a pattern is in the set's
    answer exactly when its ``search`` finds it), and the rule number of each; None when RE2 refuses one."""
    if not rules:
        return None
    try:
        patterns = re2.Set.SearchSet(_RE2_OPTIONS)
        rule_of = []
        for k, rule in enumerate(rules):
            for p in rule.patterns:
                patterns.Add(p.pattern)
                rule_of.append(k)
        patterns.Compile()
    except re2.error:
        return None
    return patterns, tuple(rule_of)


def _alternation(texts: list[str]) -> re2._Regexp | None:
    """One RE2 regex found in a name exactly when one of ``texts`` is: each wrapped in its own group, so inline
    flags keep their scope. None when there are none or the alternation does not compile (a group name used
    twice, RE2's memory bound): the caller then tries the patterns one by one."""
    if not texts:
        return None
    try:
        return re2.compile("|".join(f"(?:{t})" for t in texts), _RE2_OPTIONS)
    except re2.error:
        return None


def load_rules(extra: list[Path] | None = None) -> RuleSet:
    """Rules from the user files in ``extra`` (in order, highest precedence first), then the default file.

    Raises PhaseprofError naming the file for a missing file, bad TOML, an unknown bucket or key, a
    missing key, a bad regex, or an example its own rule does not match.
    """
    parsed = [_read(Path(p)) for p in (extra or [])] + [_read(DEFAULT_RULES_PATH)]
    kernel = tuple(rule for rules in parsed for rule in rules["kernel"])
    module = tuple(rule for rules in parsed for rule in rules["module"])
    return RuleSet(kernel=kernel, module=module)


def _read(file: Path) -> dict[str, tuple[Rule, ...]]:
    if not file.exists():
        raise PhaseprofError("rules file not found", path=file)
    require_regular_file(file, what="rules file")  # a FIFO would block the read forever
    stat = file.stat()
    if stat.st_size > _MAX_RULES_BYTES:
        raise PhaseprofError(f"over {_MAX_RULES_BYTES >> 20} MB: not a rules file", path=file)
    return _parse_file(str(file.resolve()), stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=32)
def _parse_file(path: str, mtime_ns: int, size: int) -> dict[str, tuple[Rule, ...]]:
    # Keyed by path and stamp: each file is parsed once per process unless it changes.
    file = Path(path)
    try:
        with file.open("rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise PhaseprofError(f"cannot read rules file: {exc.strerror}", path=file) from None
    except UnicodeDecodeError as exc:
        raise PhaseprofError(f"not UTF-8 text (byte {exc.start}): a rules file is TOML", path=file) from None
    except tomllib.TOMLDecodeError as exc:
        raise PhaseprofError(f"not valid TOML: {exc}", path=file) from None
    except RecursionError:
        raise PhaseprofError("TOML nested too deeply to be a rules file", path=file) from None
    unknown = sorted(set(data) - set(SECTIONS))
    if unknown:
        raise PhaseprofError(
            f"unknown section {unknown[0]!r} (expected [[kernel]] or [[module]])", path=file
        )
    out: dict[str, tuple[Rule, ...]] = {}
    for section in SECTIONS:
        tables = data.get(section, [])
        if not isinstance(tables, list):
            raise PhaseprofError(f"{section!r} must be an array of tables: write [[{section}]]", path=file)
        out[section] = tuple(
            _parse_rule(table, where=f"[[{section}]] #{i}", file=file) for i, table in enumerate(tables, 1)
        )
    return out


def _parse_rule(table: Any, *, where: str, file: Path) -> Rule:
    def fail(problem: str) -> PhaseprofError:
        return PhaseprofError(f"{where}: {problem}", path=file)

    check_keys(table, required=_REQUIRED_KEYS, allowed=_ALLOWED_KEYS, fail=fail)
    try:
        bucket = Bucket(table["bucket"])
    except (ValueError, TypeError):
        names = ", ".join(b.value for b in Bucket)
        raise fail(f"unknown bucket {table['bucket']!r} (one of: {names})") from None
    patterns = _str_list(table["patterns"], key="patterns", fail=fail)
    if not patterns:
        raise fail("'patterns' is empty")
    compiled = []
    for text in patterns:
        try:
            compiled.append(re2.compile(text, _RE2_OPTIONS))
        except re2.error as exc:
            why = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
            raise fail(f"bad regex {text[:80]!r}: {why} (RE2 syntax: no lookaround or backreferences)") from None
    why = table.get("why", "")
    if not isinstance(why, str):
        raise fail("'why' must be a string")
    rule = Rule(
        bucket=bucket,
        patterns=tuple(compiled),
        why=why,
        examples=tuple(_str_list(table.get("examples", []), key="examples", fail=fail)),
        origin=f"{file.name} {where}",
    )
    for example in rule.examples:
        if not rule.match(example):
            raise fail(f"example {example[:80]!r} matches none of the rule's patterns")
    return rule


def _str_list(value: Any, *, key: str, fail: Callable[[str], PhaseprofError]) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise fail(f"{key!r} must be a list of strings")
    return value
