"""Short kernel names for terminal tables, as Nsight Systems shows them: the function's base name, its template
arguments and parameters elided as ``‹…›``; the full name stays in the JSON and behind ``--full-names``.

::

    void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<int>, ...>(int, ...)
        -> vectorized_elementwise_kernel‹Fill›             (the functor says what the kernel does)
    void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<...> > >(...)
        -> FlashAttnFwdSm90‹…›                               (wrappers are looked through)
    ## Call CompiledFxGraph fj6ndytb5nghcnd47lllg36luhabftch2vslnptvbosqbw6njdwp ##
        -> CompiledFxGraph                                   (Inductor's cache hash dropped)

Names that come out alike in one table get ``#1``, ``#2``, ... in the order of their full names, so a table's
short names are unique and depend only on the set of names in it, never on their order.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

ELLIPSIS = "‹…›"
#: A short name never exceeds this many characters (a long name keeps its head and tail around ``‹…›``).
MAX_CHARS = 48
#: Narrower than this, a cut name says too little: tables fold the cell instead.
MIN_CHARS = 24

#: Kernels whose own name says nothing: the kernel is their first template argument (CUTLASS's entry point,
#: FlashAttention's architecture guard).
_WRAPPERS = frozenset({"device_kernel", "enable_sm90_or_later", "enable_sm80_to_sm89", "enable_sm100_or_later"})
#: An identifier inside the template arguments that names the operation (``FillFunctor``, ``ArgMaxOps``,
#: ``rsqrt_kernel_cuda``, ``silu_kernel``); the first one not in ``_GENERIC`` is shown beside the base name.
_OPERATION = re.compile(r"[A-Za-z_]\w*(?:Functor\w*|functor|Ops|_kernel_cuda|_kernel_impl|_kernel)\b")
_GENERIC = frozenset({"BinaryFunctor", "gpu_kernel_impl_nocast", "gpu_kernel_impl", "gpu_index_kernel",
                      "func_wrapper_t", "ReduceOp", "OpaqueType", "UnaryFunctor"})
_COMPILED_GRAPH = re.compile(r"^#+\s*(?:Call\s+)?(CompiledFxGraph)\s+\w+\s*#*$")
_QUALIFIED = re.compile(r"^(?:[\w~]+|\(anonymous namespace\))(?:::(?:[\w~]+|\(anonymous namespace\)))*")


def _split_top(text: str) -> tuple[str, str]:
    """(``text`` up to its first top-level ``<`` or ``(``, the rest)."""
    m = _QUALIFIED.match(text)
    return (text[:m.end()], text[m.end():]) if m else ("", text)


def _template_args(rest: str) -> str:
    """The text between ``rest``'s leading ``<`` and its matching ``>`` ('' when it does not open with ``<``)."""
    if not rest.startswith("<"):
        return ""
    depth = 0
    for i, ch in enumerate(rest):
        depth += {"<": 1, ">": -1}.get(ch, 0)
        if depth == 0:
            return rest[1:i]
    return rest[1:]


def _operation(args: str) -> str | None:
    """The operation's own word: ``FillFunctor`` -> Fill, ``CUDAFunctor_add`` -> add, ``ArgMaxOps`` -> ArgMax,
    ``rsqrt_kernel_cuda`` -> rsqrt."""
    for m in _OPERATION.finditer(args):
        word = m.group()
        if word in _GENERIC or word.startswith("_"):
            continue
        if "Functor_" in word or "OnSelf_" in word:
            return word.rsplit("_", 1)[-1]
        for suffix in ("Functor", "functor", "Ops", "_kernel_cuda", "_kernel_impl", "_kernel"):
            if word.endswith(suffix) and len(word) > len(suffix):
                return word[:-len(suffix)].rstrip("_")
        return word
    return None


def _cut(name: str, limit: int = MAX_CHARS) -> str:
    """``name`` within ``limit`` characters: its head and tail around ``‹…›`` (tails tell numbered names apart)."""
    if len(name) <= limit:
        return name
    keep = limit - len(ELLIPSIS)
    head, tail = name[:keep - keep // 3], name[len(name) - keep // 3:]
    return head.rstrip("\\") + ELLIPSIS + tail


def short_name(full: str, *, max_chars: int = MAX_CHARS) -> str:
    """The short form of one kernel (or CPU op) name, at most ``max_chars`` long (not below
    ``MIN_CHARS``); names that are not C++ signatures are only cut."""
    limit = max(max_chars, MIN_CHARS)
    name = full.strip()
    m = _COMPILED_GRAPH.match(name)
    if m:
        return m.group(1)
    name = name.removeprefix("void ").strip()
    for _ in range(4):  # look through at most this many nested wrappers
        qualified, rest = _split_top(name)
        base = qualified.rsplit("::", 1)[-1]
        if not base or not rest.startswith(("<", "(")):
            return _cut(name, limit)
        args = _template_args(rest)
        if base in _WRAPPERS and args:
            name = args.strip()  # the wrapped kernel's name opens the arguments; the next turn parses it
            continue
        if not args:
            return _cut(base, limit)
        op = _operation(args)
        label = f"‹{op}›" if op else ELLIPSIS
        if op and len(base) + len(label) > limit:  # the operation says more than the base's "_kernel"
            base = base.removesuffix("_kernel")
        if len(base) + len(label) > limit:
            keep = max(limit - len(label) - len(ELLIPSIS), 4)
            return base[:keep] + ELLIPSIS + label
        return base + label
    return _cut(name, limit)


def short_names(names: Iterable[str], *, max_chars: int = MAX_CHARS) -> dict[str, str]:
    """Full name -> short name, unique among ``names``: alike short names get ``#1``, ``#2``, ... in the order
    of their full names (so the result depends only on the set of names). ``max_chars`` bounds a short name
    before its number."""
    unique = sorted(set(names))
    groups: dict[str, list[str]] = {}
    for n in unique:
        groups.setdefault(short_name(n, max_chars=max_chars), []).append(n)
    out: dict[str, str] = {}
    for short, fulls in groups.items():
        if len(fulls) == 1:
            out[fulls[0]] = short
        else:
            out.update({f: f"{short}#{i}" for i, f in enumerate(fulls, 1)})
    seen: dict[str, list[str]] = {}
    for f, s in out.items():
        seen.setdefault(s, []).append(f)
    for s, fulls in seen.items():  # "x#1" can still equal another name's own short form: those keep full names
        if len(fulls) > 1:
            out.update({f: f for f in fulls})
    return out
