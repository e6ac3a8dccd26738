"""The two trace readers and the record of which one read a trace. No imports beyond the standard library: the
command line's parser names the choices before numpy loads.

- ``native``: the Rust scanner (``native/``, :mod:`phaseprof.trace.native`), shipped inside the wheel;
- ``python``: msgspec and :class:`~phaseprof.trace.tables.TableBuilder`, the reference the tests compare it with.

Both give the same tables; ``phaseprof analyze --reader`` chooses (default ``auto``: native where installed).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Reader(StrEnum):
    """Which reader turns a trace into tables (``phaseprof analyze --reader``)."""

    AUTO = "auto"  # the native scanner where it is installed and the read allows it, else the pure-Python one
    NATIVE = "native"  # the native scanner, or an error saying why it cannot read this trace
    PYTHON = "python"  # the pure-Python reader (msgspec): the reference


@dataclass(frozen=True)
class ReadBy:
    """Which reader made a trace's tables, and why that one (``phaseprof analyze --verbose`` prints it; the
    breakdown JSON records ``reader`` as ``tool.reader``)."""

    reader: str  # "native" or "python"
    why: str  # native: the library and its ABI; python: the option that chose it, or why the scanner was not used

    def line(self) -> str:
        """One line for people (``analyze --verbose``)."""
        if self.reader == "native":
            return f"read by the native scanner ({self.why})"
        return f"read by the pure-Python reader: {self.why}"
