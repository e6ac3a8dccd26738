"""What phaseprof's own processes (the ``phaseprof`` command, its rank workers) leave out: pyarrow.

pandas imports pyarrow whenever it is installed (it is: Streamlit needs it) and then keeps string columns in
Arrow arrays. The analysis never needs either. On a 154 MB H200 trace they cost 39 MB of imports and 57 MB of
peak RSS in all (``analyze_trace``: 203 vs 146 MB; ``benchmarks/bench_analyze.py``), more than a third of the
trace's own size. A ``None`` entry in ``sys.modules`` makes ``import pyarrow`` raise ImportError (the import
system's documented way to block a module), so pandas runs as without pyarrow: Python string storage, the same
numbers (``tests/test_lean_process.py``).

Only processes phaseprof starts itself do this, and only before pandas is imported; library users, the
Streamlit dashboard (its own process, started by ``phaseprof dashboard``) and the commands that run vLLM or torch
in-process (``capture``, ``sweep``, ``ceilings``: ``phaseprof.commands.main.ENGINE_COMMANDS``) keep pyarrow.
``PHASEPROF_PYARROW=1`` keeps it in phaseprof's processes too.

:func:`own_process` tells whether this process is the ``phaseprof`` program itself (``cli.entry`` marks it), whose
whole-process settings phaseprof may change (the garbage collector around the first read, ``commands.analyze_plain``).
"""

from __future__ import annotations

import os
import sys

#: Set to 1 to let phaseprof's own processes import pyarrow.
KEEP_ENV = "PHASEPROF_PYARROW"

#: The trace reader's switch for reading one big trace in two processes (``trace.tables`` split read):
#: ``0`` never splits; ``1`` splits whatever the size (tests: every committed trace); unset: by size.
SPLIT_ENV = "PHASEPROF_SPLIT_READ"


_own = False


def mark_own_process() -> None:
    """Record that this process is the ``phaseprof`` program itself (``cli.entry``), not a library user's."""
    global _own
    _own = True


def own_process() -> bool:
    """Whether this process is the ``phaseprof`` program: whole-process settings (the garbage collector's) are
    then phaseprof's to make."""
    return _own


def leave_out_pyarrow() -> bool:
    """Block pyarrow in this process unless pandas or pyarrow is already imported or ``PHASEPROF_PYARROW=1``.
    True when it did."""
    if os.environ.get(KEEP_ENV) == "1" or "pandas" in sys.modules or "pyarrow" in sys.modules:
        return False
    sys.modules["pyarrow"] = None  # type: ignore[assignment]
    return True


#: The BLAS libraries' thread-count settings: numpy's OpenBLAS starts one thread per CPU as it loads.
BLAS_THREAD_ENVS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def single_threaded_blas() -> bool:
    """One BLAS thread in this process (where the user set no count), before numpy loads; True when set.

    Why: OpenBLAS starts a thread per CPU as numpy is imported, and each spins a while before it sleeps:
    ~0.07 CPU-s of a 2-core machine at every ``phaseprof analyze`` start (more on more cores), taken from the
    read it overlaps. phaseprof's analysis calls no BLAS routine that threads would speed up. Not for
    the commands that run an engine (torch's CPU kernels take their thread counts from these settings)."""
    if "numpy" in sys.modules:
        return False
    for var in BLAS_THREAD_ENVS:
        os.environ.setdefault(var, "1")
    return True


def init_rank_worker() -> None:
    """Initializer of ``--jobs`` rank workers. Lives here, away from pandas: a spawned worker imports its
    initializer's module before anything else. The workers already use the cores, so none splits its read in two
    processes and the machine is not oversubscribed."""
    leave_out_pyarrow()
    os.environ[SPLIT_ENV] = "0"
