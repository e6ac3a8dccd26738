"""What the rank workers' forkserver imports once before it forks them (``scale/workers.py``): pyarrow left out
and BLAS single-threaded (each worker already has a core of its own) before numpy and pandas load, then the
analysis. Setting up here is what ``lean_process.init_rank_worker`` does in a spawned worker."""

from phaseprof.lean_process import init_rank_worker, single_threaded_blas

single_threaded_blas()

init_rank_worker()

import phaseprof.scale.rank_task  # noqa: E402,F401
