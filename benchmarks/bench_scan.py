#!/usr/bin/env python
"""The native scanner alone: MB of decompressed JSON per CPU-second of ``pp_add``, against references
measured in the same run.

The trace's ``traceEvents`` array is cut into chunks the way the stream loader cuts it (``stream._cut``: a
separator ``}`` ws ``,`` ws ``{`` near the end of each ~1 MB piece; a chunk cut at a false separator is merged with
the next) and held in memory; then, rounds interleaved (a burst of load from other work on the shared machine
falls on every contender) and each round starting at the next contender, each contender scans all chunks into a
fresh scanner:

- **scanner**: this tree's ``phaseprof/trace/_phaseprof_scan*.so`` (the newest, as ``trace/native.py`` picks);
- **baseline** (``--baseline-src DIR``): the scanner built in ``DIR`` (``git archive COMMIT phaseprof native | tar
  -x -C DIR``, then ``python -m phaseprof.trace.native`` there for a commit from before the wheel built
  the scanner, else ``cargo build --release --offline`` in ``DIR/native`` and its
  ``target/release/libphaseprof_scan.so`` copied to ``DIR/phaseprof/trace/_phaseprof_scan.abi3.so``);
- **orjson**: ``orjson.loads`` of the same chunks (a general JSON parser building Python objects; for scale).

Time is the process's CPU time (user + system, ``time.process_time``: everything runs on this thread), the best
of the rounds. Every scanner's columns and strings are compared byte for byte with the baseline's (or, without
one, nothing to compare); the run fails if they differ.

Usage::

    python benchmarks/bench_scan.py TRACE.json.gz --baseline-src /tmp/base --repeat 5
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from phaseprof.trace import stream  # noqa: E402

_COLUMNS = 12
_FAMILIES = 5
_MEMORY_COLUMNS = 7
_ROOM = 4096  # bytes after each chunk in its buffer (the stream reader's has ~1 MB)
_ITEMSIZE = (1, 4, 4, 4, 8, 8, 8, 4, 8, 8, 8, 8)  # bytes per row of each family column (kind i8, name i32, ...)
_MEMORY_ITEMSIZE = (8, 4, 4, 8, 8, 8, 8)


def decompressed(path: Path) -> bytes:
    if path.suffix != ".gz":
        return path.read_bytes()
    from isal import igzip
    with igzip.open(path) as f:
        return f.read()


def chunks_of(doc: bytes, piece_bytes: int, scans: Callable[[bytes], bool]) -> list[bytes]:
    """The event array as the stream loader hands it to the scanner: ``[e, ..., e]`` chunks of ~piece_bytes, each
    one that ``scans`` (a chunk cut at a false separator is merged with the next, as ``stream`` does)."""
    m = stream._EVENTS_KEY.search(doc)
    if m is None:
        sys.exit("bench_scan: no traceEvents key in the trace")
    pos, out, carry = m.end(), [], b""
    while pos < len(doc):
        buf = bytearray(b"[" + carry + doc[pos:pos + piece_bytes])
        pos += piece_bytes
        cut = stream._cut(buf, 0, len(buf))
        if cut is not None:
            end, rest = cut
            chunk = bytes(buf[:end]) + b"]"
            if scans(chunk):
                out.append(chunk)
                carry = bytes(buf[rest:])
                continue
        carry = bytes(buf[1:])
    end = len(carry)
    while (end := carry.rfind(b"]", 0, end)) >= 0:  # the array's end: the last "]" before which the events scan
        if scans(b"[" + carry[:end + 1]):
            return out + [b"[" + carry[:end + 1]]
    sys.exit("bench_scan: cannot find the end of the event array")


def library_in(tree: Path) -> Path:
    """The scanner library built in ``tree``: the newest ``phaseprof/trace/_phaseprof_scan*.so``."""
    found = sorted((tree / "phaseprof" / "trace").glob("_phaseprof_scan*.so"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise SystemExit(f"no scanner built in {tree}/phaseprof/trace (pip install --no-deps -e . there)")
    return found[-1]


class Scanner:
    """One built scanner library, loaded by path (two builds can be loaded side by side)."""

    def __init__(self, so: Path) -> None:
        lib = ctypes.CDLL(str(so))
        vp, sz = ctypes.c_void_p, ctypes.c_size_t
        lib.pp_new.restype = vp
        lib.pp_free.argtypes = [vp]
        lib.pp_add.argtypes = [vp, ctypes.c_char_p, sz, ctypes.POINTER(ctypes.c_uint64)]
        lib.pp_add.restype = ctypes.c_int
        self.take = hasattr(lib, "pp_take")  # columns moved out (and runs) since s9; pp_column before
        if self.take:
            lib.pp_take.argtypes = [vp, ctypes.c_int, ctypes.c_int, ctypes.POINTER(vp), ctypes.POINTER(sz)]
            lib.pp_take.restype = sz
            lib.pp_take_run.argtypes = [vp, ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_int64)]
            lib.pp_take_run.restype = sz
            lib.pp_release.argtypes = [vp, sz, ctypes.c_int]
        else:
            lib.pp_column.argtypes = [vp, ctypes.c_int, ctypes.c_int, ctypes.POINTER(vp)]
            lib.pp_column.restype = sz
        lib.pp_strings.argtypes = [vp, ctypes.c_int, ctypes.POINTER(vp), ctypes.POINTER(sz), ctypes.POINTER(vp)]
        lib.pp_strings.restype = sz
        self.in_place = hasattr(lib, "pp_add_in_place")  # the baseline may predate it
        if self.in_place:
            lib.pp_add_in_place.argtypes = [vp, vp, sz, sz, ctypes.POINTER(ctypes.c_uint64)]
            lib.pp_add_in_place.restype = ctypes.c_int
        self.lib = lib

    def accepts(self, chunk: bytes) -> bool:
        """Whether a fresh scanner takes ``chunk``."""
        h, counts = self.lib.pp_new(), (ctypes.c_uint64 * 2)()
        try:
            return self.lib.pp_add(h, chunk, len(chunk), counts) == 0
        finally:
            self.lib.pp_free(h)

    def scan(self, chunks: list[bytes]) -> tuple[float, bytes]:
        """CPU seconds to scan every chunk into a fresh scanner, and a dump of what it holds. Chunks are scanned
        as the stream reader hands them over: in place, in a buffer with room after them, where the scanner can."""
        lib, counts = self.lib, (ctypes.c_uint64 * 2)()
        if self.in_place:
            buffers = [(ctypes.c_char * (len(c) + _ROOM)).from_buffer(bytearray(c) + bytes(_ROOM)) for c in chunks]
            calls = [(ctypes.addressof(b), len(c)) for b, c in zip(buffers, chunks)]
        h = lib.pp_new()
        try:
            t0 = time.process_time()
            if self.in_place:
                for ptr, n in calls:
                    if (rc := lib.pp_add_in_place(h, ptr, n, _ROOM, counts)) != 0:
                        sys.exit(f"bench_scan: the scanner refused a chunk (rc {rc})")
            else:
                for c in chunks:
                    if (rc := lib.pp_add(h, c, len(c), counts)) != 0:
                        sys.exit(f"bench_scan: the scanner refused a chunk (rc {rc})")
            cpu = time.process_time() - t0
            return cpu, self._dump(h)
        finally:
            lib.pp_free(h)

    def _dump(self, h: int) -> bytes:
        lib, parts, ptr = self.lib, [], ctypes.c_void_p()
        for fam in range(_FAMILIES + 1):
            sizes = _MEMORY_ITEMSIZE if fam == _FAMILIES else _ITEMSIZE
            for col, size in enumerate(sizes):
                if self.take:
                    float_col = col == 0 if fam == _FAMILIES else col in (4, 5)  # ts (and dur): f64
                    parts.append(self._take(h, fam, col, size, float_col=float_col))
                    continue
                n = lib.pp_column(h, fam, col, ctypes.byref(ptr))
                parts.append(ctypes.string_at(ptr.value, n * size) if n else b"")
        for which in range(3):
            blob, blob_len, offsets = ctypes.c_void_p(), ctypes.c_size_t(), ctypes.c_void_p()
            n = lib.pp_strings(h, which, ctypes.byref(blob), ctypes.byref(blob_len), ctypes.byref(offsets))
            parts.append(ctypes.string_at(blob.value, blob_len.value) if blob_len.value else b"")
            parts.append(ctypes.string_at(offsets.value, 8 * (n + 1)))
        return b"\0".join(parts)


    def _take(self, h: int, fam: int, col: int, size: int, *, float_col: bool) -> bytes:
        """A column's rows as bytes, as pp_column gave them: a constant run written out, the column taken and
        freed."""
        lib, value = self.lib, ctypes.c_int64()
        n = lib.pp_take_run(h, fam, col, ctypes.byref(value))
        if n:
            return value.value.to_bytes(8, "little", signed=True)[:size] * n
        ptr, cap = ctypes.c_void_p(), ctypes.c_size_t()
        n = lib.pp_take(h, fam, col, ctypes.byref(ptr), ctypes.byref(cap))
        data = ctypes.string_at(ptr.value, n * size) if n else b""
        lib.pp_release(ptr, cap.value, 9 if float_col else size)
        return data


def orjson_scan(chunks: list[bytes]) -> float:
    import orjson
    t0 = time.process_time()
    for c in chunks:
        orjson.loads(c)
    return time.process_time() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--baseline-src", type=Path, help="a tree with the baseline scanner built")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--piece-bytes", type=int, default=stream.PIECE_BYTES)
    ap.add_argument("--no-orjson", action="store_true")
    args = ap.parse_args()

    doc = decompressed(args.trace)
    mine = Scanner(library_in(ROOT))
    chunks = chunks_of(doc, args.piece_bytes, mine.accepts)
    del doc
    mb = sum(len(c) for c in chunks) / 1e6
    contenders: dict[str, Callable[[], tuple[float, bytes | None]]] = {}
    contenders["scanner"] = lambda: mine.scan(chunks)
    if args.baseline_src is not None:
        base = Scanner(library_in(args.baseline_src))
        contenders["baseline"] = lambda: base.scan(chunks)
    if not args.no_orjson:
        contenders["orjson"] = lambda: (orjson_scan(chunks), None)

    best: dict[str, float] = {}
    dumps: dict[str, bytes] = {}
    gc.disable()
    names = list(contenders)
    for r in range(args.repeat):
        # each round starts at the next contender: who runs after whom (memory just freed by another scan, or by
        # orjson's objects) changes the page faults a scan pays
        for name in names[r % len(names):] + names[:r % len(names)]:
            run = contenders[name]
            cpu, dump = run()
            best[name] = min(best.get(name, cpu), cpu)
            if dump is not None:
                dumps.setdefault(name, dump)
    gc.enable()

    reference = "baseline" if "baseline" in dumps else "scanner"
    for name, dump in dumps.items():
        if dump != dumps[reference]:
            sys.exit(f"bench_scan: the {name} scanner's columns differ from the {reference}'s")

    cpu_model = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                      if ln.startswith("model name")), platform.processor())
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {cpu_model}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"# {args.trace.name}: {mb:.1f} MB of events in {len(chunks)} chunks, best CPU of {args.repeat} rounds; "
          f"columns identical to the {reference}'s")
    ref = best.get("baseline")
    print(f"{'contender':<10} {'CPU s':>7} {'MB/CPU-s':>9}" + (f" {'vs baseline':>12}" if ref else ""))
    for name in ("scanner", "baseline", "orjson"):
        if name in best:
            row = f"{name:<10} {best[name]:>7.3f} {mb / best[name]:>9.0f}"
            if ref:
                row += f" {ref / best[name]:>11.2f}x"
            print(row)


if __name__ == "__main__":
    main()
